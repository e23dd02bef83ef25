"""Claims by priority range and a failure's retry_after_s over HTTP (DESIGN 5, 7)."""
from __future__ import annotations

import asyncio

import pytest

from tests.api_support import Api, assert_error


@pytest.mark.parametrize("fields, field", [
    ({"priority_min": 5, "priority_max": 4}, "priority_max"),
    ({"priority_min": -1}, "priority_min"),
    ({"priority_max": 11}, "priority_max"),
    ({"priority_min": 1.5}, "priority_min"),
    ({"priority_max": "3"}, "priority_max"),
    ({"priority_min": True}, "priority_min"),
])
async def test_bad_range_is_a_400_naming_the_field(api: Api, tt, fields, field):
    status, body = await api.call("POST", "/v1/claims",
                                  {"worker_id": "w", "task_types": [tt], **fields})
    assert_error(status, body, 400, "invalid_argument")
    assert body["error"]["details"]["field"] == field


async def test_range_claim_takes_only_its_range(api: Api, tt):
    low = await api.submit(task_type=tt, priority=8)
    high = await api.submit(task_type=tt, priority=1)
    assert await api.claim([tt], max_tasks=5, priority_min=4, priority_max=6) == []
    got = await api.claim([tt], max_tasks=5, priority_min=7, priority_max=10)
    assert [t["task_id"] for t in got] == [low["task_id"]]
    got = await api.claim([tt], max_tasks=5, priority_max=3)
    assert [t["task_id"] for t in got] == [high["task_id"]]


async def test_waiting_range_claim_sleeps_through_other_work_and_wakes_for_its_own(api: Api, tt):
    waiting = asyncio.ensure_future(api.claim([tt], wait_s=20, priority_max=2))
    await asyncio.sleep(0.05)
    await api.submit(task_type=tt, priority=9)
    await asyncio.sleep(0.2)
    assert not waiting.done()
    mine = await api.submit(task_type=tt, priority=2)
    tasks = await asyncio.wait_for(waiting, 10)
    assert [t["task_id"] for t in tasks] == [mine["task_id"]]


@pytest.mark.parametrize("value", [0, -1, "5", True, 86_401, float("inf")])
async def test_bad_retry_after_is_a_400_naming_it(api: Api, tt, value):
    t = await api.submit(task_type=tt)
    (c,) = await api.claim([tt])
    body = {"fencing_token": c["fencing_token"], "error": "429", "retry_after_s": value}
    if value == float("inf"):
        body["retry_after_s"] = 1e300
    status, got = await api.call("POST", f"/v1/tasks/{t['task_id']}/fail", body)
    assert_error(status, got, 400, "invalid_argument")
    assert got["error"]["details"]["field"] == "retry_after_s"


async def test_retry_after_over_the_tasks_max_backoff_is_refused(api: Api, tt):
    t = await api.submit(task_type=tt, retry={"backoff": "fixed", "base_s": 1, "max_s": 60})
    (c,) = await api.claim([tt])
    body = {"fencing_token": c["fencing_token"], "error": "429", "retry_after_s": 61}
    status, got = await api.call("POST", f"/v1/tasks/{t['task_id']}/fail", body)
    assert_error(status, got, 400, "invalid_argument")
    assert got["error"]["details"]["field"] == "retry_after_s"
    body["retry_after_s"] = 45
    status, got = await api.call("POST", f"/v1/tasks/{t['task_id']}/fail", body)
    assert status == 200 and got["state"] == "pending" and got["status"] == "retrying"
    assert got["next_retry_at"] == got["run_at"] and got["attempts"][0]["outcome"] == "failed"
