"""The claim's decision (scheduling/claims.py) driven with a `ClaimRequest` against a real
single-node replica and proposer: no HTTP, no aiohttp object anywhere."""
from __future__ import annotations

import ast
import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from tsched.statemachine import commands as c

from tsched.node.raft.commit import propose_one
from tsched.node.raft.replica import Replica
from tsched.node.scheduling import claims
from tsched.node.scheduling.claim_hub import ClaimHub
from tsched.node.scheduling.claim_request import ClaimOutcome, ClaimRequest

from tests.unit.node.scheduling.services_support import Services, proposing

SCHEDULING = Path(__file__).parents[4] / "node" / "scheduling"


@pytest.fixture
async def node(replica: Replica):
    loop = asyncio.get_running_loop()
    s = proposing(replica)
    s.claims = ClaimHub(s)

    hub = s.claims
    closed = False

    def listener(seq: int, cmds: list[Any], results: list[Any]) -> None:
        if not closed:
            try:
                loop.call_soon_threadsafe(hub.wake)
            except RuntimeError:
                pass    # the test's loop is gone

    replica.add_apply_listener(listener)
    hub.start()
    yield s
    closed = True
    await hub.close()


async def _no_forward(leader: str, remaining: float, answered: bool) -> ClaimOutcome | None:
    raise AssertionError("the single node leads: nothing is forwarded")


async def _no_head_forward(leader: str) -> ClaimOutcome:
    raise AssertionError("the single node leads: nothing is forwarded")


async def _submit(node: Services, task_type: str, priority: int = 5) -> str:
    tid = uuid.uuid4().hex
    await propose_one(node, c.SubmitTask(request_id=uuid.uuid4().hex, now_ms=node.clock.now_ms(),
                                         task_id=tid, task_type=task_type, tenant="default",
                                         payload_json="{}", priority=priority, run_at_ms=None,
                                         timeout_ms=60_000, max_retries=3,
                                         retry=c.RetryPolicy(), idempotency_key=None))
    return tid


def _tt() -> str:
    return "sched-" + uuid.uuid4().hex[:8]


async def test_a_claim_takes_the_task(node: Services) -> None:
    tt = _tt()
    tid = await _submit(node, tt)
    out = await claims.claim(node, ClaimRequest(worker_id="w", task_types=(tt,)),
                             lambda: False, _no_forward)
    assert [t["task_id"] for t in out.tasks] == [tid]
    assert out.tasks[0]["state"] == "running" and not out.ready and out.completions is None


async def test_a_watch_leases_nothing(node: Services) -> None:
    tt = _tt()
    tid = await _submit(node, tt)
    out = await claims.claim(node, ClaimRequest(worker_id="w", task_types=(tt,), watch=True,
                                                wait_s=1), lambda: False, _no_forward)
    assert out.ready and out.tasks == []
    with node.replica.read() as sm:
        task = sm.get_task(tid)
        assert task is not None and task.state == "pending"


async def test_a_head_read_returns_the_head(node: Services) -> None:
    tt = _tt()
    await _submit(node, tt, priority=2)
    await _submit(node, tt, priority=7)
    out = await claims.head(node, ClaimRequest(worker_id="w", task_types=(tt,), head=True),
                            _no_head_forward)
    assert out.head == 2 and out.tasks == []
    empty = await claims.head(node, ClaimRequest(worker_id="w", task_types=(_tt(),),
                                                 head=True), _no_head_forward)
    assert empty.head is None


async def test_a_gone_callers_tasks_are_released(node: Services) -> None:
    tt = _tt()
    waiting = asyncio.ensure_future(claims.claim(
        node, ClaimRequest(worker_id="gone", task_types=(tt,), wait_s=5), lambda: True,
        _no_forward))
    await asyncio.sleep(0.05)      # waiting at the hub before the task comes
    tid = await _submit(node, tt)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        with node.replica.read() as sm:
            task = sm.get_task(tid)
            attempts = list(task.attempts) if task is not None else []
        if attempts and attempts[-1].outcome == "released":
            break
        assert loop.time() < deadline, attempts
        await asyncio.sleep(0.01)
    assert task is not None and task.state == "pending"
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)


def test_scheduling_imports_no_aiohttp_nor_the_rooms_above() -> None:
    above = ("aiohttp", "tsched.node.api", "tsched.node.services", "tsched.node.shards")
    for path in sorted(SCHEDULING.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for n in ast.walk(tree):
            names = ([a.name for a in n.names] if isinstance(n, ast.Import)
                     else [n.module or ""] if isinstance(n, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(above), f"{path.name} imports {name}"
