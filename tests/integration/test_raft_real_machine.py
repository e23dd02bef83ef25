"""Three Replicas with the real StateMachine (codec, request table, snapshots, digest)."""
from __future__ import annotations

import asyncio

import pytest

from tests.harness.waits import wait_until
from tests.integration.raft_support import leader_of, real_replica, running_trio, submit
from tsched.node.raft.proposer import Proposer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def trio(tmp_path):
    yield from running_trio(tmp_path)


def has_tasks(replica, ids) -> bool:
    with replica.read() as sm:
        return all(sm.get_task(t) is not None for t in ids)


def same_state(replicas) -> bool:
    return len({(r.applied_seq, r.digest()) for r in replicas}) == 1


async def test_submit_through_a_follower_dedup_and_restart_after_snapshot(trio):
    replicas, specs = trio["replicas"], trio["specs"]
    leader = await asyncio.to_thread(wait_until, lambda: leader_of(replicas), 15, "a leader")
    i = next(k for k, r in enumerate(replicas) if r is not leader)
    follower = replicas[i]
    proposer = Proposer(follower, asyncio.get_running_loop())
    outs = await asyncio.gather(*(proposer.propose([submit(f"rq{n}", task_id=f"task{n}")], 10)
                                  for n in range(10)))
    assert all(res.ok and res.value["duplicate"] is False for (res,), _ in outs)
    ids = [f"task{n}" for n in range(10)]
    # The same request_id again: recorded result, nothing applied twice.
    (again,), _ = await proposer.propose([submit("rq0", task_id="other")], 10)
    assert again.value["task"].task_id == "task0"
    with follower.read() as sm:
        assert sm.get_task("other") is None
    await asyncio.to_thread(wait_until, lambda: all(has_tasks(r, ids) for r in replicas), 10,
                            "tasks everywhere")
    await asyncio.to_thread(wait_until, lambda: same_state(replicas), 10, "equal digests")
    # The follower applied the batches it proposed from their commands (proposed.py); the
    # others decoded those bytes; the states are equal all the same.
    assert follower._proposed.taken >= 1 and leader._proposed.taken == 0

    before = follower.snapshots_written
    follower.force_snapshot()
    await asyncio.to_thread(wait_until, lambda: follower.snapshots_written > before, 10, "snapshot")
    (late,), _ = await proposer.propose([submit("rq-late", task_id="late")], 10)
    assert late.ok
    follower.stop()
    replicas[i] = None
    back = real_replica(specs[i])
    back.start()
    replicas[i] = back
    await asyncio.to_thread(wait_until, lambda: has_tasks(back, ids + ["late"]), 10, "recovered")
    await asyncio.to_thread(wait_until, lambda: same_state(replicas), 10, "equal digests")
