"""Keyed limit endpoints (issue 46): /v1/limits, tasks naming limits, limited_by, and the
RateLimited report; every bad input's 4xx."""
from __future__ import annotations

import pytest

from tests.api_support import Api, assert_error


async def _put(api: Api, name: str, **body):
    status, out = await api.call("PUT", f"/v1/limits/{name}", body)
    assert status == 200, out
    return out


async def test_put_get_list_delete(api: Api, tt):
    name = f"partner-{tt}"
    out = await _put(api, name, rate=50, per_s=1, concurrency=10, partition_by="account_id")
    assert out["name"] == name and out["rate"] == 50 and out["per_s"] == 1
    assert out["concurrency"] == 10 and out["partition_by"] == "account_id"
    assert out["in_use"] == 0 and out["held"] == 0 and out["partitions"] == []
    status, got = await api.call("GET", f"/v1/limits/{name}")
    assert status == 200 and got["name"] == name
    status, listed = await api.call("GET", "/v1/limits")
    assert status == 200 and name in [x["name"] for x in listed["limits"]]
    status, gone = await api.call("DELETE", f"/v1/limits/{name}")
    assert status == 200 and gone["name"] == name
    status, body = await api.call("GET", f"/v1/limits/{name}")
    assert_error(status, body, 404, "not_found")
    status, body = await api.call("DELETE", f"/v1/limits/{name}")
    assert_error(status, body, 404, "not_found")


@pytest.mark.parametrize("body", [
    {}, {"per_s": 1}, {"rate": 0}, {"rate": -1}, {"rate": "5"}, {"concurrency": 0},
    {"rate": 5, "per_s": 0}, {"rate": 5, "per_s": "x"}, {"rate": 10**9},
    {"rate": 5, "partition_by": ""}, {"rate": 5, "partition_by": "a b"},
    {"rate": 5, "partition_by": 3}, {"rate": 5, "extra": 1}, {"concurrency": 2, "per_s": 1},
])
async def test_bad_limit_bodies_are_400(api: Api, tt, body):
    status, out = await api.call("PUT", f"/v1/limits/x-{tt}", body)
    assert_error(status, out, 400, "invalid_argument")


async def test_bad_names_and_a_changed_partitioning(api: Api, tt):
    status, out = await api.call("PUT", "/v1/limits/" + "x" * 65, {"rate": 1})
    assert_error(status, out, 400, "invalid_argument")
    status, out = await api.call("PUT", "/v1/limits/a%20b", {"rate": 1})
    assert_error(status, out, 400, "invalid_argument")
    await _put(api, f"p-{tt}", concurrency=2, partition_by="tenant")
    status, out = await api.call("PUT", f"/v1/limits/p-{tt}", {"concurrency": 2})
    assert_error(status, out, 409, "conflict")


async def test_submit_naming_an_unknown_limit_is_400_naming_it(api: Api, tt):
    status, out = await api.call("POST", "/v1/tasks", {"task_type": tt, "limits": ["nope"]})
    assert_error(status, out, 400, "invalid_argument")
    assert "nope" in out["error"]["message"]
    for bad in (["a", "a"], "a", [1], ["a"] * 5, [""]):
        status, out = await api.call("POST", "/v1/tasks", {"task_type": tt, "limits": bad})
        assert_error(status, out, 400, "invalid_argument")


async def test_a_held_task_shows_why_it_waits(api: Api, tt):
    name = f"one-{tt}"
    await _put(api, name, concurrency=1)
    first = await api.submit(task_type=tt, limits=[name])
    second = await api.submit(task_type=tt, limits=[name])
    assert first["limits"] == [name]
    (got,) = await api.claim([tt], max_tasks=5)
    assert got["task_id"] == first["task_id"]
    assert await api.claim([tt], max_tasks=5) == []
    status, held = await api.call("GET", f"/v1/tasks/{second['task_id']}")
    assert status == 200 and held["state"] == "pending" and held["attempt"] == 0
    assert held["limited_by"] == {"limit": name, "partition": "", "until": None}
    status, usage = await api.call("GET", f"/v1/limits/{name}")
    assert usage["in_use"] == 1 and usage["held"] == 1
    status, done = await api.call("POST", f"/v1/tasks/{got['task_id']}/complete",
                                  {"fencing_token": got["fencing_token"]})
    assert status == 200
    (nxt,) = await api.claim([tt], max_tasks=5)
    assert nxt["task_id"] == second["task_id"]


async def test_rate_limited_pauses_and_does_not_count_the_attempt(api: Api, tt):
    name = f"rl-{tt}"
    await _put(api, name, rate=100)
    await api.submit(task_type=tt, limits=[name])
    await api.submit(task_type=tt, limits=[name])
    (got,) = await api.claim([tt], max_tasks=1)
    path = f"/v1/tasks/{got['task_id']}/rate-limited"
    for bad in ({"fencing_token": got["fencing_token"], "limit": "other"},
                {"fencing_token": got["fencing_token"], "limit": name, "after_s": 0},
                {"fencing_token": got["fencing_token"], "limit": name, "after_s": 10**7},
                {"limit": name}):
        status, out = await api.call("POST", path, bad)
        assert_error(status, out, 400, "invalid_argument")
    status, out = await api.call("POST", path, {"fencing_token": got["fencing_token"],
                                                "limit": name, "after_s": 30})
    assert status == 200 and out["state"] == "pending" and out["attempt"] == 0
    assert out["attempts"][-1]["outcome"] == "rate_limited"
    assert await api.claim([tt], max_tasks=5) == []
    status, held = await api.call("GET", f"/v1/tasks/{got['task_id']}")
    assert held["limited_by"]["limit"] == name and held["limited_by"]["until"]
    status, out = await api.call("POST", path, {"fencing_token": got["fencing_token"],
                                                "limit": name})
    assert_error(status, out, 409, "stale_token")


async def test_metrics_show_use_and_held_tasks(api: Api, tt):
    name = f"m-{tt}"
    await _put(api, name, concurrency=1)
    for _ in range(3):
        await api.submit(task_type=tt, limits=[name])
    assert len(await api.claim([tt], max_tasks=5)) == 1
    resp = await api.client.get("/metrics")
    text = await resp.text()
    assert f'tsched_limit_in_use{{limit="{name}"}} 1.0' in text
    assert f'tsched_limit_held_tasks{{limit="{name}"}} 2.0' in text
