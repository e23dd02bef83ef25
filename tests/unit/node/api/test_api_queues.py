"""Paused queues' endpoints (issue 48): /v1/queues/pause, /resume, GET /v1/queues, a task's
`paused`, the audit entries, and every bad input's 4xx."""
from __future__ import annotations

import pytest

from tests.api_support import Api, assert_error


async def _pause(api: Api, **body):
    status, out = await api.call("POST", "/v1/queues/pause", body)
    assert status == 200, out
    return out


async def test_pause_holds_a_type_and_resume_lets_it_run(api: Api, tt):
    task = await api.submit(task_type=tt)
    out = await _pause(api, task_type=tt, reason="partner bank maintenance")
    assert out["task_type"] == tt and out["tenant"] is None and out["changed"] is True
    assert out["actor"] == "anonymous" and out["reason"] == "partner bank maintenance"
    assert out["paused_at"]
    again = await _pause(api, task_type=tt, reason="other words")
    assert again["changed"] is False and again["reason"] == "partner bank maintenance"
    assert await api.claim([tt], max_tasks=5) == []
    status, got = await api.call("GET", f"/v1/tasks/{task['task_id']}")
    assert status == 200 and got["state"] == "pending"
    assert got["paused"] == {k: out[k] for k in ("task_type", "tenant", "paused_at", "actor",
                                                 "reason")}
    status, listed = await api.call("GET", "/v1/queues")
    assert status == 200 and {"task_type": tt, "tenant": None} in [
        {"task_type": p["task_type"], "tenant": p["tenant"]} for p in listed["pauses"]]
    status, resumed = await api.call("POST", "/v1/queues/resume", {"task_type": tt})
    assert status == 200 and resumed["changed"] is True and resumed["resumed_at"]
    (claimed,) = await api.claim([tt], max_tasks=5)
    assert claimed["task_id"] == task["task_id"]
    status, got = await api.call("GET", f"/v1/tasks/{task['task_id']}")
    assert got["paused"] is None
    status, out = await api.call("POST", "/v1/queues/resume", {"task_type": tt})
    assert_error(status, out, 404, "not_found")
    status, audit = await api.call("GET", f"/v1/audit?target=task_type={tt}")
    assert [e["action"] for e in audit["entries"]] == ["queue.resume", "queue.pause"]


async def test_pause_by_tenant_and_type(api: Api, tt):
    mine = await api.submit(task_type=tt, tenant=f"{tt}-a")
    other = await api.submit(task_type=tt, tenant=f"{tt}-b")
    await _pause(api, task_type=tt, tenant=f"{tt}-a")
    (got,) = await api.claim([tt], max_tasks=5)
    assert got["task_id"] == other["task_id"]
    status, _ = await api.call("POST", "/v1/queues/resume",
                               {"task_type": tt, "tenant": f"{tt}-a"})
    assert status == 200
    (got,) = await api.claim([tt], max_tasks=5)
    assert got["task_id"] == mine["task_id"]


@pytest.mark.parametrize("body", [
    None, [], {}, {"reason": "x"}, {"task_type": ""}, {"task_type": 3}, {"tenant": "a b"},
    {"tenant": "x" * 65}, {"task_type": "x" * 129}, {"task_type": "a", "reason": 5},
    {"task_type": "a", "reason": "r" * 257}, {"task_type": "a", "extra": 1},
    {"task_type": "a", "reason": "line\nbreak"},
])
async def test_bad_pause_bodies_are_400(api: Api, body):
    status, out = await api.call("POST", "/v1/queues/pause", body)
    assert_error(status, out, 400, "invalid_argument")


@pytest.mark.parametrize("body", [None, {}, {"task_type": "a", "reason": "x"}, {"tenant": ""}])
async def test_bad_resume_bodies_are_400(api: Api, body):
    status, out = await api.call("POST", "/v1/queues/resume", body)
    assert_error(status, out, 400, "invalid_argument")


async def test_bad_queries_are_400(api: Api):
    status, out = await api.call("POST", "/v1/queues/pause?x=1", {"task_type": "a"})
    assert_error(status, out, 400, "invalid_argument")
    status, out = await api.call("GET", "/v1/queues?x=1")
    assert_error(status, out, 400, "invalid_argument")
