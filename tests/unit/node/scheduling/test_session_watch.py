"""The leader's watch over worker sessions (scheduling/session_watch.py) against a real
single-node replica and proposer: a silent session is ended and its tasks given back; a
new term starts every session afresh; a round that came late (this process held) is not
taken for the workers' silence. Rounds are driven by hand; the last-heard times are set
back to stand for the time that passed."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tsched.statemachine import commands as c

from tsched.node.raft.commit import propose_one
from tsched.node.raft.replica import Replica
from tsched.node.scheduling.session_watch import SessionWatch

from tests.unit.node.scheduling.services_support import proposing


@pytest.fixture
async def watch(replica: Replica):
    yield SessionWatch(proposing(replica))


async def _write(w: SessionWatch, cmd_type: type, **fields: object) -> object:
    cmd = cmd_type(request_id=uuid.uuid4().hex, now_ms=w.node.clock.now_ms(), **fields)
    value, _ = await propose_one(w.node, cmd)
    return value


async def _held_task(w: SessionWatch, worker_id: str) -> str:
    """A session of 3 s for `worker_id` and a task leased to it for 10 minutes."""
    kind = f"k-{uuid.uuid4().hex[:8]}"
    await _write(w, c.OpenSession, worker_id=worker_id, timeout_ms=3_000)
    task_id = uuid.uuid4().hex
    await _write(w, c.SubmitTask, task_id=task_id, tenant="t", task_type=kind)
    claimed = await _write(w, c.Claim, worker_id=worker_id, task_types=(kind,),
                           lease_ms=600_000)
    assert [t["task_id"] for t in claimed] == [task_id]
    return task_id


def _state(w: SessionWatch, task_id: str) -> str:
    with w.node.replica.read() as sm:
        return sm.tasks[task_id].state


async def _settled(w: SessionWatch) -> None:
    """Until the EndSession commands the last round proposed are answered."""
    for _ in range(500):
        if not w._ending:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("an EndSession was not answered")


async def test_a_silent_session_is_ended_and_a_heard_one_kept(watch: SessionWatch):
    silent, heard = f"s-{uuid.uuid4().hex[:6]}", f"h-{uuid.uuid4().hex[:6]}"
    lost, kept = await _held_task(watch, silent), await _held_task(watch, heard)
    await watch._round()                       # leading: both start now
    now = time.monotonic()
    watch._heard[silent] = now - 3.5           # 3.5 s without a word: past its 3 s
    watch._heard[heard] = now - 2.5
    watch.seen(heard)                          # ... but it just spoke
    await watch._round()
    await _settled(watch)
    assert (_state(watch, lost), _state(watch, kept)) == ("pending", "running")
    with watch.node.replica.read() as sm:
        assert silent not in sm.sessions and heard in sm.sessions
    assert watch.expired == 1


async def test_a_new_term_starts_every_session_afresh(watch: SessionWatch):
    worker = f"t-{uuid.uuid4().hex[:6]}"
    task_id = await _held_task(watch, worker)
    await watch._round()
    watch._heard[worker] = time.monotonic() - 3.5   # silent past its timeout, but ...
    watch._term = -1                                # ... this node has just taken over
    await watch._round()
    await _settled(watch)
    assert _state(watch, task_id) == "running"
    silent_s = watch.silent_s(worker)
    assert silent_s is not None and silent_s < 1.0   # a fresh full timeout from the takeover


async def test_a_late_round_does_not_count_as_the_workers_silence(watch: SessionWatch):
    worker = f"l-{uuid.uuid4().hex[:6]}"
    task_id = await _held_task(watch, worker)
    await watch._round()
    watch._heard[worker] = time.monotonic() - 5.0   # last heard 5 s ago, but this process
    watch._last_round = time.monotonic() - 5.0      # was held for those 5 s itself
    await watch._round()
    await _settled(watch)
    assert _state(watch, task_id) == "running"
