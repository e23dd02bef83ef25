"""The autoscaling signals (DESIGN 14.4): a worker's `slots` on its claims and heartbeats,
every bad one a 400 naming it; `tsched_worker_slots` and `tsched_ready_tasks` in /metrics."""
from __future__ import annotations

import asyncio

import pytest

from tests.api_support import Api, assert_error


async def _metric(api: Api, line_start: str) -> float | None:
    text = await (await api.client.get("/metrics")).text()
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    return None


async def test_claims_and_heartbeats_report_slots_and_ready_tasks_count(api: Api, tt):
    for delay in (None, None, None, 600):   # the last one is future-dated: not ready
        await api.submit(task_type=tt, **({"delay_s": delay} if delay else {}))
    ready = f'tsched_ready_tasks{{task_type="{tt}"}}'
    assert await _metric(api, ready) == 3
    tasks = await api.claim([tt], worker_id=f"w-{tt}", max_tasks=2,
                            slots={"total": 4, "busy": {}})
    assert await _metric(api, ready) == 1
    assert await _metric(api, f'tsched_worker_slots{{state="idle",task_type="{tt}"}}') == 4
    status, _ = await api.call("POST", "/v1/heartbeats", {
        "heartbeats": [{"task_id": t["task_id"], "fencing_token": t["fencing_token"]}
                       for t in tasks],
        "slots": {"worker_id": f"w-{tt}", "task_types": [tt], "total": 4,
                  "busy": {tt: 2}}})
    assert status == 200
    assert await _metric(api, f'tsched_worker_slots{{state="busy",task_type="{tt}"}}') == 2
    assert await _metric(api, f'tsched_worker_slots{{state="idle",task_type="{tt}"}}') == 2
    # A worker that stops reporting falls out once its report is older than the TTL.
    api.node.worker_slots.ttl_s = 0.05
    await asyncio.sleep(0.1)
    assert await _metric(api, f'tsched_worker_slots{{state="busy",task_type="{tt}"}}') is None


@pytest.mark.parametrize("slots, field", [
    ({"total": 0}, "slots.total"), ({"total": 10_001}, "slots.total"),
    ({"busy": {}}, "slots.total"), ({"total": 2, "busy": []}, "slots.busy"),
    ({"total": 2, "busy": {"other-type": 1}}, "slots.busy"),
    ({"total": 2, "busy": {"T": 3}}, "slots.busy"), ({"total": 2, "busy": {"T": -1}}, "slots.busy"),
    ({"total": 2, "idle": 2}, None), ("4", None),
])
async def test_bad_slots_are_a_400_naming_them(api: Api, tt, slots, field):
    if isinstance(slots, dict) and isinstance(slots.get("busy"), dict):
        slots = {**slots, "busy": {tt if k == "T" else k: v for k, v in slots["busy"].items()}}
    status, body = await api.call("POST", "/v1/claims", {
        "worker_id": "w", "task_types": [tt], "wait_s": 0, "slots": slots})
    assert_error(status, body, 400, "invalid_argument")
    if field is not None:
        assert body["error"]["details"]["field"] == field
    named = {**slots, "worker_id": "w", "task_types": [tt]} if isinstance(slots, dict) else slots
    status, body = await api.call("POST", "/v1/heartbeats", {
        "heartbeats": [{"task_id": "x", "fencing_token": 1}], "slots": named})
    assert_error(status, body, 400, "invalid_argument")
