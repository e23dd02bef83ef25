"""A refused write leaves no reference cycle behind: reference counting alone frees it.

The node freezes the survivors of each full collection (gcpolicy), so an object alive at
that moment which later becomes part of a cycle is never freed. Every request in flight is
alive at some full collection under load, so whatever a request leaves in a cycle leaks
for good: a refusal through Raft once left its error, traceback and six frames (and the
request they held) in one, and a node at 3x overload grew by 4-6 MB a minute.
"""
from __future__ import annotations

import asyncio
import gc

import pytest

from tests.api_support import Api, assert_error, until
from tsched.node.api.read_budget import READ_BUDGET
from tsched.node.errors import ApiError


@pytest.fixture(autouse=True)
def _no_garbage_before():
    """Each test starts with nothing left for the cyclic collector."""
    gc.collect()
    gc.garbage.clear()


def _cyclic_garbage_of_the_node() -> list:
    """What the cyclic collector alone would free that the node made: errors and frames
    of tsched's code (the test client and the event loop make cycles of their own)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [o for o in gc.garbage
                 if isinstance(o, ApiError)
                 or (type(o).__name__ == "frame" and "/node/" in o.f_code.co_filename)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return found


async def test_a_write_refused_by_the_state_machine_leaves_no_cycle(api: Api, tt):
    t = await api.submit(task_type=tt, delay_s=600)
    status, _ = await api.call("POST", f"/v1/tasks/{t['task_id']}/cancel")
    assert status == 200
    gc.collect()            # the test's own setup is not what is checked
    gc.garbage.clear()
    for _ in range(3):     # refused through Raft: the answer is an ApiError raised on
        status, body = await api.call("POST", f"/v1/tasks/{t['task_id']}/cancel")
        assert_error(status, body, 409, "invalid_state")
    assert _cyclic_garbage_of_the_node() == []


async def test_a_tasks_whole_life_and_its_refusals_leave_no_cycle(api: Api, tt):
    status, out = await api.call("POST", "/v1/tasks", {"tasks": [{"task_type": tt}] * 3})
    assert status == 201
    ids = [t["task_id"] for t in out["tasks"]]
    claimed = await api.claim([tt], max_tasks=3)
    tok = {c["task_id"]: c["fencing_token"] for c in claimed}
    status, _ = await api.call("POST", "/v1/heartbeats", {"heartbeats": [
        {"task_id": ids[0], "fencing_token": tok[ids[0]], "lease_s": 5},
        {"task_id": ids[1], "fencing_token": tok[ids[1]] + 1000}]})
    assert status == 200
    status, _ = await api.call("POST", f"/v1/tasks/{ids[2]}/fail",
                               {"fencing_token": tok[ids[2]] + 1000, "error": "x"})
    assert status == 409
    status, _ = await api.call("POST", "/v1/completions", {"completions": [
        {"task_id": ids[0], "fencing_token": tok[ids[0]], "result": 1},
        {"task_id": ids[1], "fencing_token": tok[ids[1]], "error": "no", "retryable": False},
        {"task_id": "0" * 32, "fencing_token": 1, "result": None}]})
    assert status == 200
    for path in (f"/v1/tasks/{ids[0]}", f"/v1/tasks/{'0' * 32}", "/v1/tasks?limit=5",
                 "/v1/stats", "/v1/cluster"):
        status, _ = await api.call("GET", path)
        assert status in (200, 404)
    assert _cyclic_garbage_of_the_node() == []


async def test_long_polls_answered_by_a_submit_or_by_their_wait_leave_no_cycle(api: Api, tt):
    assert await api.claim([tt], wait_s=0.2) == []           # the wait runs out
    hub = api.node.claims
    before = hub.waiting
    waiting = asyncio.ensure_future(api.claim([tt], wait_s=10))
    await until(lambda: hub.waiting > before, "the claim waiting")
    await api.submit(task_type=tt)
    (claimed,) = await waiting
    status, _ = await api.call("POST", "/v1/completions", {"completions": [
        {"task_id": claimed["task_id"], "fencing_token": claimed["fencing_token"]}]})
    assert status == 200
    del waiting
    assert _cyclic_garbage_of_the_node() == []


async def test_a_submit_refused_before_raft_leaves_no_cycle(api: Api, tt):
    status, body = await api.call("POST", "/v1/tasks",
                                  {"task_type": tt, "run_at": "2026-01-01T00:00:00Z",
                                   "idempotency_key": "k", "tenant": "t" * 200})
    assert status == 400        # refused before Raft: no cycle either
    assert _cyclic_garbage_of_the_node() == []


async def test_a_listing_refused_by_the_read_budget_leaves_no_cycle(api: Api):
    """A page past the node's budget of listing pages (api/read_budget.py) is a 429 raised
    in the handler, before anything is read."""
    budget = api.client.app[READ_BUDGET]
    budget.pages_per_s = 0.001   # a token every 1,000 s: once the burst is taken, none
    while budget.tokens() >= 1:
        budget.reserve()
    gc.collect()
    gc.garbage.clear()
    for path in ("/v1/tasks?limit=1", "/v1/workflows", "/v1/audit"):
        status, body = await api.call("GET", path)
        assert_error(status, body, 429, "overloaded")
        assert body["error"]["details"]["reason"] == "read_budget"
    assert _cyclic_garbage_of_the_node() == []
