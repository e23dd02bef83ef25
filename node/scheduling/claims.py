"""Long-poll claims (DESIGN.md section 4).

At the leader, `ClaimHub` keeps the waiting claims. Its dispatcher wakes when an applied
batch may have made work claimable (or the timer says a task fell due), asks
`sm.has_claimable` for each idle waiter, and proposes one `Claim` per ready waiter in one
batch; the state machine picks the tasks at apply time, so two waiters never share a task.
A waiter whose HTTP connection is gone when its claim commits gets its tasks released.
Elsewhere, `claim()` has the request forwarded to the leader (by the API's `forward`: HTTP
is the API's business, api/claim_forwarding.py) and follows leader changes.

A claim whose answer was lost (the leader died after its Claim committed) is asked again by
the client with the same Idempotency-Key, at another node: the Claims of a waiter take
their request ids from that key (`<key digest>.0`, `.1`, ... in the order the waiter
proposes them), so the new leader's first Claim for the retry is answered from the request
table with the tasks the lost one took, rather than leaving them leased to nobody until
their lease runs out. Only tasks still leased to the same worker id are handed out again.

A *watch* (the header `X-Tsched-Claim-Watch: 1`, sent by the router of a sharded node to
each shard while a claim waits on all of them) waits like a claim but leases nothing: it
is answered `{"tasks": [], "ready": true}` as soon as a claim of its kind would find work.
The router then claims at that shard without waiting, so a claim waiting on S shards leases
tasks at the one it claims from only, and nothing has to be given back (DESIGN.md 13).

A *head read* (the header `X-Tsched-Claim-Head: 1`, sent by the router to every shard
before it claims) waits for no work and leases nothing: the leader answers
`{"tasks": [], "head": N}`, N the effective priority of the most urgent task a claim of its
kind would take there (null: none), so that the router asks the most urgent shard first
(DESIGN.md 5.1, 13).

This module is the request's side, on any node (`claim()`: wait here as the leader, or
forward to it); it takes a parsed `ClaimRequest` (claim_request.py) and answers a
`ClaimOutcome`. The leader's hub is claim_hub.py and a waiter waiters.py.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from tsched.node.errors import ApiError
from tsched.node.scheduling.claim_hub import CATCH_UP_WAIT_S_MAX, HubServices
from tsched.node.scheduling.claim_request import ClaimOutcome, ClaimRequest
from tsched.node.scheduling.claimed_types import ClaimedTypes
from tsched.node.scheduling.worker_slots import WorkerSlots
from tsched.node.scheduling.reports import completion_commands
from tsched.node.scheduling.waiters import READY, Completions, NotLeader

LEADER_WAIT_S = 0.1        # pause before asking again who leads, while there is no leader

T = TypeVar("T")

# The leader's answer to this claim, sent on by the API: (leader id, seconds left, whether
# the carried completions were answered already, so go without them) -> the answer, or
# None if that leader could not serve it.
Forward = Callable[[str, float, bool], Awaitable[ClaimOutcome | None]]
# A head read sent on to the leader (it waits for no work there): its answer.
HeadForward = Callable[[str], Awaitable[ClaimOutcome]]


class ClaimServices(HubServices, Protocol):
    """What a claim needs of the node's services (`services.Node` is one)."""

    stop_event: asyncio.Event
    claimed_types: ClaimedTypes   # the types asked for at this node as the leader
    worker_slots: WorkerSlots     # the workers' slots their claims reported here, leading

    @property
    def stopping(self) -> bool: ...


# --- the request, on any node -------------------------------------------------------------

async def claim(node: ClaimServices, req: ClaimRequest, is_gone: Callable[[], bool],
                forward: Forward) -> ClaimOutcome:
    """Claim at the leader, wherever that is, within `req.wait_s`. The carried completions'
    results come with the outcome, or the claim fails with `timeout`. `is_gone`: the
    caller went away (tasks claimed for it are released)."""
    done = None
    if req.completions is not None:
        cmds = completion_commands(node, req.completions, req.completion_ids, req.tenant)
        done = Completions(cmds, results=None if cmds else [], minimal=req.minimal)
    out = await _claim(node, req, is_gone, forward, done)
    if done is None:
        return out
    if done.results is None:
        # Forwarded, but no leader answered: they may or may not have been applied.
        raise ApiError("timeout", "the completions were not answered in time",
                       {"outcome": "unknown"})
    return ClaimOutcome(out.tasks, out.seq, ready=out.ready, completions=done.results)


async def _claim(node: ClaimServices, req: ClaimRequest, is_gone: Callable[[], bool],
                 forward: Forward, done: Completions | None) -> ClaimOutcome:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + req.wait_s
    leader_seen = False
    while True:
        if node.stopping:
            raise ApiError("unavailable", "this node is stopping", {"node": node.node_id})
        remaining = max(0.0, deadline - loop.time())
        replica = node.replica
        leader = replica.leader_id()
        if leader == node.node_id and replica.is_ready_leader():
            leader_seen = True
            _note(node, req, replica.term)
            try:
                return await _here(node, req, remaining, is_gone, done)
            except NotLeader:
                if req.forwarded:
                    raise ApiError("no_leader", "this node stopped leading") from None
        elif req.forwarded and leader != node.node_id:
            # The sender thinks this node leads; it does not: let the sender look again.
            raise ApiError("no_leader", "this node is not the leader",
                           {"leader": leader})
        elif leader is not None and leader != node.node_id:
            leader_seen = True
            answered = done is not None and done.results is not None
            answer = await _unless_stopping(node, forward(leader, remaining, answered))
            if answer is not None:
                if done is not None and done.results is None:
                    done.results = answer.completions or []
                return answer
        if loop.time() >= deadline:
            if leader_seen:
                return ClaimOutcome([], replica.applied_seq)
            raise ApiError("no_leader", "no leader was reachable during the wait")
        await asyncio.sleep(min(LEADER_WAIT_S, max(0.0, deadline - loop.time())))


def _note(node: ClaimServices, req: ClaimRequest, term: int) -> None:
    """What a claim at the leader tells of its worker: the types it asks for, its slots."""
    now_s = time.monotonic()
    node.claimed_types.note(req.task_types, term, now_s)
    if req.slots is not None:
        node.worker_slots.report(req.worker_id, req.task_types, req.slots, now_s)


async def _here(node: ClaimServices, req: ClaimRequest, wait_s: float,
                is_gone: Callable[[], bool], done: Completions | None) -> ClaimOutcome:
    """Wait at this node, the leader."""
    assert node.claims is not None, "the app's startup context makes the claim hub"
    tasks, seq = await node.claims.wait(req, wait_s, is_gone, done)
    seq = seq if seq is not None else node.replica.applied_seq
    if tasks is READY:
        return ClaimOutcome([], seq, ready=True)
    return ClaimOutcome(tasks, seq)


async def _unless_stopping(node: ClaimServices, coro: Awaitable[T]) -> T:
    """Await coro, but give up (cancelling it) as soon as the node starts stopping."""
    work = asyncio.ensure_future(coro)
    stop = asyncio.ensure_future(node.stop_event.wait())
    try:
        await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if not work.done():
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        raise ApiError("unavailable", "this node is stopping", {"node": node.node_id})
    return work.result()


def _read_head(node: ClaimServices, req: ClaimRequest) -> int | None:
    """The most urgent effective priority a claim of this kind would take at this replica
    now; a weighted claim takes from its tiers' ranges only: their most urgent."""
    now = node.clock.now_ms()
    ranges = [(lo, hi) for lo, hi, _ in req.tier_weights]
    with node.replica.read() as sm:
        heads = [sm.claim_head(req.task_types, req.tenant, req.prefetch_ms, now, r)
                 for r in ranges or [req.priorities]]
    return min((h for h in heads if h is not None), default=None)


async def head(node: ClaimServices, req: ClaimRequest, forward: HeadForward) -> ClaimOutcome:
    """The claim's head at the leader: the effective priority of the most urgent task a
    claim of this kind would take now (None: none), with the applied seq. Read at the
    leader (a follower asks it once, by `forward`); waits for no work, leases nothing.
    A head of None is read again once the leader has applied what it knew committed, as
    a claim that finds nothing looks again (claim_hub.py): what was acknowledged counts."""
    replica = node.replica
    leader = replica.leader_id()
    if leader == node.node_id and replica.is_ready_leader():
        node.claimed_types.note(req.task_types, replica.term, time.monotonic())
        found = _read_head(node, req)
        if found is None and await replica.applied_index.catch_up(CATCH_UP_WAIT_S_MAX):
            found = _read_head(node, req)
        return ClaimOutcome([], replica.applied_seq, head=found)
    if leader is None or leader == node.node_id or req.forwarded:
        raise ApiError("no_leader", "this node is not the leader", {"leader": leader})
    return await forward(leader)
