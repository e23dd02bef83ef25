"""The Proposer on three real Replicas: packing, answers keyed by request_id, re-proposal
after a failure, and the no_leader / timeout outcomes."""
from __future__ import annotations

import asyncio

import pytest

from tests.harness.waits import wait_until
from tests.integration.raft_support import cluster_spec, leader_of, make_replica, submit
from tsched.node.raft.proposer import ProposalError, Proposer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def trio(tmp_path):
    replicas = [make_replica(s) for s in cluster_spec(tmp_path)]
    for r in replicas:
        r.start()
    yield replicas
    for r in replicas:
        r.stop()


async def wait_leader(replicas):
    return await asyncio.to_thread(wait_until, lambda: leader_of(replicas), 15, "a ready leader")


async def test_concurrent_proposals_share_one_entry_and_each_gets_its_answer(trio):
    leader = await wait_leader(trio)
    follower = next(r for r in trio if r is not leader)
    proposer = Proposer(follower, asyncio.get_running_loop(),
                        render=lambda cmd, res: (cmd.request_id, res.value["task_id"]))
    outs = await asyncio.gather(*(proposer.propose([submit(f"p{i}")], 10) for i in range(20)))
    for i, (results, seq) in enumerate(outs):
        assert results == [(f"p{i}", f"p{i}")]
        assert seq <= follower.applied_seq
    assert proposer.entries_proposed == 1          # twenty callers, one Raft entry
    assert len({seq for _, seq in outs}) == 1


async def test_a_repeated_request_id_is_answered_with_the_first_result(trio):
    leader = await wait_leader(trio)
    proposer = Proposer(leader, asyncio.get_running_loop())
    (first,), seq1 = await proposer.propose([submit("same", task_id="t1")], 10)
    # Same request_id, different body: the request table answers with the recorded result.
    (second,), seq2 = await proposer.propose([submit("same", task_id="t2")], 10)
    assert first.value == second.value == {"task_id": "t1", "n": 1}
    assert seq2 == seq1 + 1
    with leader.read() as sm:
        assert list(sm.tasks) == ["t1"]


async def test_a_request_id_waited_for_twice_is_answered_at_every_position(trio):
    leader = await wait_leader(trio)
    proposer = Proposer(leader, asyncio.get_running_loop(),
                        render=lambda cmd, res: res.value["task_id"])
    both = asyncio.ensure_future(proposer.propose(
        [submit("dup", task_id="d1"), submit("other"), submit("dup", task_id="d2")], 10))
    await asyncio.sleep(0)     # those three are queued first
    (alone,), _ = await proposer.propose([submit("dup", task_id="d3")], 10)
    results, seq = await both
    assert results == ["d1", "other", "d1"] and alone == "d1"
    assert seq <= leader.applied_seq
    assert proposer._waiters == {}       # nothing left waiting


async def test_reproposes_after_a_failure_until_applied(trio):
    leader = await wait_leader(trio)
    follower = next(r for r in trio if r is not leader)
    proposer = Proposer(follower, asyncio.get_running_loop(), retry_backoff_s=0.01)
    real = follower.propose_blob
    calls = []

    def flaky(blob, on_error=None, cmds=None):
        calls.append(blob)
        if len(calls) == 1:                   # the first attempt is "lost" with LEADER_CHANGED
            on_error("leader_changed")
            return
        real(blob, on_error, cmds)

    follower.propose_blob = flaky
    (res,), _ = await proposer.propose([submit("retry-me")], 10)
    assert res.ok and len(calls) == 2 and calls[0] == calls[1]


async def test_no_leader_and_timeout(tmp_path):
    spec = cluster_spec(tmp_path)[0]
    lone = make_replica(spec)                 # its peers never start: no leader ever
    lone.start()
    try:
        proposer = Proposer(lone, asyncio.get_running_loop())
        with pytest.raises(ProposalError) as e:
            await proposer.propose([submit("x")], 0.3)
        assert e.value.code == "no_leader"
    finally:
        lone.stop()


async def test_timeout_when_a_leader_exists_but_nothing_commits(trio):
    leader = await wait_leader(trio)
    proposer = Proposer(leader, asyncio.get_running_loop(), repropose_after_s=0.1)
    leader.propose_blob = lambda blob, on_error=None: None      # swallowed: ambiguous
    with pytest.raises(ProposalError) as e:
        await proposer.propose([submit("lost")], 0.4)
    assert e.value.code == "timeout"


async def test_a_full_queue_refuses_sheddable_proposals_at_once_and_never_the_others(trio):
    leader = await wait_leader(trio)
    proposer = Proposer(leader, asyncio.get_running_loop(), waiting_max=5)
    waiting = [asyncio.ensure_future(proposer.propose([submit(f"w{i}")], 10, sheddable=True))
               for i in range(5)]
    await asyncio.sleep(0)     # the five are waiting for their commit
    with pytest.raises(ProposalError) as refused:
        await proposer.propose([submit("one-too-many")], 10, sheddable=True)
    assert refused.value.code == "overloaded" and proposer.refused_full == 1
    # a proposal that drains the load (not sheddable) still goes in over the bound
    (drained,), _ = await proposer.propose([submit("report")], 10)
    assert drained.ok
    for fut in waiting:
        (result,), _ = await fut
        assert result.ok
    (after,), _ = await proposer.propose([submit("after")], 10, sheddable=True)
    assert after.ok                 # the queue drained: admitted again


async def test_an_urgent_submit_is_admitted_up_to_twice_the_bound(trio):
    """Overload keeps the urgent (DESIGN 5.1): past the bound an urgent proposal still goes
    in, up to `urgent_bound_factor` times the bound; past that it is refused too."""
    leader = await wait_leader(trio)
    proposer = Proposer(leader, asyncio.get_running_loop(), waiting_max=3)
    waiting = [asyncio.ensure_future(proposer.propose([submit(f"w{i}")], 10, sheddable=True))
               for i in range(3)]
    await asyncio.sleep(0)     # the queue is full
    with pytest.raises(ProposalError):
        await proposer.propose([submit("lower")], 10, sheddable=True)
    urgent = [asyncio.ensure_future(proposer.propose([submit(f"u{i}")], 10, sheddable=True,
                                                     urgent=True)) for i in range(3)]
    await asyncio.sleep(0)     # six wait: twice the bound
    with pytest.raises(ProposalError) as refused:
        await proposer.propose([submit("one-too-many")], 10, sheddable=True, urgent=True)
    assert refused.value.code == "overloaded" and proposer.refused_full == 2
    for fut in waiting + urgent:
        (result,), _ = await fut
        assert result.ok


async def test_a_batch_larger_than_the_room_left_is_admitted_while_the_queue_is_not_full(trio):
    leader = await wait_leader(trio)
    proposer = Proposer(leader, asyncio.get_running_loop(), waiting_max=5)
    first = asyncio.ensure_future(proposer.propose(
        [submit(f"a{i}") for i in range(4)], 10, sheddable=True))
    await asyncio.sleep(0)     # four wait: one short of the bound
    results, _ = await proposer.propose([submit(f"b{i}") for i in range(5)], 10, sheddable=True)
    assert all(r.ok for r in results) and proposer.refused_full == 0
    assert all(r.ok for r in (await first)[0])
