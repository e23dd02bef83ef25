"""Workflow endpoints (DESIGN.md section 5.2): submit, get, list, cancel, a step's parents;
every bad graph or field a 4xx in the error shape naming the step, and nothing created."""
from __future__ import annotations

import uuid

import pytest

from tsched.node.api.workflow_body import STEPS_MAX
from tests.api_support import Api, assert_error


def _tenant() -> str:
    return "wf-" + uuid.uuid4().hex[:8]   # the module shares one replica


async def _submit(api: Api, steps, **fields):
    return await api.call("POST", "/v1/workflows", {"steps": steps, **fields})


async def _run(api: Api, task_type: str, result=None, fail: bool = False):
    (task,) = await api.claim(task_types=(task_type,))
    verb = "fail" if fail else "complete"
    body = {"fencing_token": task["fencing_token"]}
    body.update({"error": "boom", "retryable": False} if fail else {"result": result})
    status, out = await api.call("POST", f"/v1/tasks/{task['task_id']}/{verb}", body)
    assert status == 200, out
    return task


async def test_submit_get_and_children_that_see_their_parents(api: Api, tt):
    tenant = _tenant()
    steps = [{"name": "a", "task_type": tt + "a", "payload": {"n": 1}},
             {"name": "b", "task_type": tt + "b"},
             {"name": "sum", "task_type": tt + "s", "deps": ["a", "b"]}]
    status, wf = await _submit(api, steps, tenant=tenant)
    assert status == 201, wf
    assert wf["state"] == "running" and wf["tenant"] == tenant and wf["duplicate"] is False
    assert [s["state"] for s in wf["steps"]] == ["pending", "pending", "waiting"]
    await _run(api, tt + "a", {"x": 1})
    await _run(api, tt + "b", {"x": 2})
    (child,) = await api.claim(task_types=(tt + "s",))
    status, seen = await api.call("GET", f"/v1/tasks/{child['task_id']}/parents")
    assert status == 200 and seen["step"] == "sum" and seen["workflow_id"] == wf["workflow_id"]
    assert {k: v["result"] for k, v in seen["parents"].items()} == {"a": {"x": 1},
                                                                    "b": {"x": 2}}
    status, got = await api.call("GET", f"/v1/workflows/{wf['workflow_id']}")
    assert status == 200 and got["counts"] == {"completed": 2, "running": 1}
    assert got["steps"][2]["deps"] == ["a", "b"] and got["steps"][0]["result"] == {"x": 1}
    status, page = await api.call("GET", f"/v1/workflows?tenant={tenant}&state=running")
    assert status == 200 and [w["workflow_id"] for w in page["workflows"]] == \
        [wf["workflow_id"]]
    status, task = await api.call("GET", f"/v1/tasks/{child['task_id']}")
    assert task["workflow"] == {"workflow_id": wf["workflow_id"], "step": "sum"}


async def test_a_plain_task_has_no_parents(api: Api, tt):
    t = await api.submit(task_type=tt)
    status, seen = await api.call("GET", f"/v1/tasks/{t['task_id']}/parents")
    assert status == 200 and seen == {"workflow_id": None, "step": None, "parents": {},
                                      "applied_seq": seen["applied_seq"]}


@pytest.mark.parametrize("steps, words, step", [
    ([{"name": "a", "task_type": "t", "deps": ["b"]},
      {"name": "b", "task_type": "t", "deps": ["a"]}], "cycle", None),
    ([{"name": "a", "task_type": "t", "deps": ["nope"]}], "unknown step 'nope'", "a"),
    ([{"name": "a", "task_type": "t"}, {"name": "a", "task_type": "t"}], "twice", "a"),
    ([{"name": "a", "task_type": "t", "priority": 11}], "priority", "a"),
    ([{"name": "a", "task_type": "t", "on_parent_failure": "maybe"}], "cancel or run", "a"),
    ([{"name": "a", "task_type": "t", "run_at": 5}], "not a step's field", "a"),
    ([{"name": "a", "task_type": "t", "deps": "b"}], "list of step names", "a"),
    ([{"task_type": "t"}], "name", None),
    ([], "non-empty", None),
])
async def test_a_bad_graph_is_a_400_naming_the_step_and_nothing_is_created(
        api: Api, steps, words, step):
    tenant = _tenant()
    status, body = await _submit(api, steps, tenant=tenant)
    assert_error(status, body, 400, "invalid_argument")
    assert words in body["error"]["message"]
    if step is not None:
        assert body["error"]["details"]["step"] == step
    status, page = await api.call("GET", f"/v1/workflows?tenant={tenant}")
    assert page["workflows"] == []


async def test_too_many_steps_is_a_400_naming_the_bound(api: Api):
    steps = [{"name": f"s{i}", "task_type": "t"} for i in range(STEPS_MAX + 1)]
    status, body = await _submit(api, steps)
    assert_error(status, body, 400, "invalid_argument")
    assert body["error"]["details"]["limit"] == STEPS_MAX


async def test_idempotency_and_cancel(api: Api, tt):
    tenant = _tenant()
    steps = [{"name": "a", "task_type": tt}, {"name": "b", "task_type": tt, "deps": ["a"]}]
    status, first = await _submit(api, steps, tenant=tenant, idempotency_key="k")
    status, again = await _submit(api, steps, tenant=tenant, idempotency_key="k")
    assert status == 201 and again["duplicate"] is True
    assert again["workflow_id"] == first["workflow_id"]
    wid = first["workflow_id"]
    status, out = await api.call("POST", f"/v1/workflows/{wid}/cancel")
    assert status == 200 and out["state"] == "cancelled" and out["cancel_requested"]
    status, out = await api.call("POST", f"/v1/workflows/{wid}/cancel")
    assert_error(status, out, 409, "invalid_state")
    status, out = await api.call("POST", "/v1/workflows/nope/cancel")
    assert_error(status, out, 404, "not_found")
    status, out = await api.call("GET", "/v1/workflows?state=bogus")
    assert_error(status, out, 400, "invalid_argument")
    status, out = await api.call("GET", "/v1/workflows?cursor=zz")
    assert_error(status, out, 400, "invalid_argument")


async def test_a_steps_result_over_its_bound_is_refused_413(api: Api, tt):
    status, wf = await _submit(api, [{"name": "a", "task_type": tt}], tenant=_tenant())
    (task,) = await api.claim(task_types=(tt,))
    status, out = await api.call("POST", f"/v1/tasks/{task['task_id']}/complete",
                                 {"fencing_token": task["fencing_token"],
                                  "result": "x" * 20_000})
    assert_error(status, out, 413, "too_large")
    assert out["error"]["details"]["limit"] == 16_384


async def test_a_10000_step_fan_out_and_its_callback_is_one_submit(api: Api, tt):
    steps = [{"name": f"s{i}", "task_type": tt} for i in range(10_000)]
    steps.append({"name": "cb", "task_type": tt + "cb", "deps": [s["name"] for s in steps]})
    status, wf = await _submit(api, steps, tenant=_tenant())
    assert status == 201 and wf["counts"] == {"pending": 10_000, "waiting": 1}, wf["counts"]


async def test_a_workflow_over_the_log_entry_bound_is_a_413_and_nothing_is_created(api: Api):
    tenant = _tenant()   # 20,000 small steps: about 0.7 MB of JSON, 1.1 MB in the log
    steps = [{"name": f"s{i}", "task_type": "t"} for i in range(STEPS_MAX)]
    status, body = await _submit(api, steps, tenant=tenant)
    assert_error(status, body, 413, "too_large")
    assert body["error"]["details"]["limit"] == api.node.replica.options.entry_bytes_max
    status, page = await api.call("GET", f"/v1/workflows?tenant={tenant}")
    assert page["workflows"] == []


async def test_a_retried_submit_with_its_idempotency_key_header_applies_once(api: Api, tt):
    tenant = _tenant()
    body = {"tenant": tenant, "steps": [{"name": "a", "task_type": tt}]}
    headers = {"Idempotency-Key": "wf-retry-" + tt}
    s1, first = await api.call("POST", "/v1/workflows", body, headers=headers)
    s2, again = await api.call("POST", "/v1/workflows", body, headers=headers)
    assert s1 == s2 == 201 and again["workflow_id"] == first["workflow_id"]
    status, page = await api.call("GET", f"/v1/workflows?tenant={tenant}")
    assert len(page["workflows"]) == 1
