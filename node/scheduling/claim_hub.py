"""The leader's side of long-poll claims (see claims.py for the whole story): `ClaimHub`
keeps the waiting claims and its dispatcher proposes one `Claim` per ready waiter in one
batch, adapting how many waiters of one kind it wakes at once to how full their Claims
come back; tasks claimed for a waiter that has gone are released."""
from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from collections.abc import Iterable
from typing import Callable, Protocol, cast

from tsched.statemachine import commands as c

from tsched.node.clock import Clock
from tsched.node.errors import ApiError
from tsched.node.ids import new_id as _new_id
from tsched.node.raft.commit import Proposing, propose
from tsched.node.raft.replica import Replica
from tsched.node.scheduling.claim_request import Answer, ClaimRequest, ItemAnswer, JsonObject
from tsched.node.scheduling.waiters import (READY, WAITERS_MAX, Completions, NotLeader, Waiter,
                                            WaiterTable)

log = logging.getLogger("tsched.node.claims")

# Waiters of one kind (task types, tenant, prefetch) dispatched per round: starts at one and
# doubles while every Claim comes back full, so one submit does not wake a whole herd of
# idle workers into empty Claims, while a backlog still gets drained by many at once. It
# doubles from what it was, not from how many one round sent: a backlog's Claims mostly go
# one per round (each as its request arrives), and doubling that kept the fan-out at 2, so
# a Worker's pipelined claims waited here for the Claims ahead of them to commit
# (bench/notes/2026-12-06-worker-pipeline.md).
FANOUT_MAX = 256
# A leader that briefly loses sight of its quorum (a slow tick under load) keeps its waiters;
# one that has not been the ready leader for this long hands them back.
UNREADY_GRACE_S = 2.0
# A claim that finds nothing waits, past its own wait_s if need be, until the leader has
# applied every entry it knew committed (AppliedIndexWatcher.catch_up); at most this.
CATCH_UP_WAIT_S_MAX = 5.0

# Commands whose application can make a task claimable (a new or returned task, a freed
# tenant slot, time passing). A batch of only Claims/Heartbeats/Barriers cannot.
_ENABLING = (c.SubmitTask, c.Fail, c.Release, c.Replay, c.Complete, c.Cancel, c.Tick, c.Fire,
             c.SetTenant, c.PutLimit, c.DeleteLimit, c.PauseLimit, c.ResumeQueue, c.EndSession)


class Rearming(Protocol):
    def state_changed(self) -> None: ...


class HubServices(Proposing, Protocol):
    """What the claims need of the node's services (`services.Node` is one)."""

    node_id: str
    replica: Replica
    clock: Clock
    claims: ClaimHub | None

    @property
    def timer(self) -> Rearming | None: ...   # a LeaderTimer (timer.py): `state_changed()`


Kind = tuple[tuple[str, ...], str | None, int, tuple[int, int], tuple[tuple[int, int, int], ...]]


def enables_claims(cmds: Iterable[object]) -> bool:
    return any(isinstance(cmd, _ENABLING) for cmd in cmds)


@dataclass
class _Stats:
    proposed: int = 0
    released: int = 0


class ClaimHub:
    def __init__(self, node: HubServices) -> None:
        self.node = node
        self._waiters = WaiterTable()
        self._ids = itertools.count(1)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._fanout: dict[Kind, int] = {}
        self._unready_since: float | None = None
        self.stats = _Stats()

    # -- lifecycle --
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="claim-dispatcher")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.abandon(force=True)

    def wake(self, new_work: bool = True) -> None:
        """Look for ready waiters. `new_work`: something may have become claimable (an
        applied submit, release, tick; a task falling due), so blocked waiters may try again."""
        if new_work:
            for w in self._waiters.values():
                w.blocked = False
        self._wake.set()

    def abandon(self, force: bool = False) -> None:
        """Leadership is gone: let every waiter go elsewhere. A waiter whose Claim is in
        flight keeps waiting for it (unless `force`): if it commits, its tasks are leased to
        that worker."""
        for w in list(self._waiters.values()):
            if w.busy and not force:
                w.abandoned = True
                continue
            if not w.future.done():
                w.future.set_exception(NotLeader())
            self._waiters.discard(w.id)

    def check_leadership(self) -> bool:
        """True if this node may dispatch now; hands the waiters back once it is clearly
        not the leader (another leads, or it has not been ready for UNREADY_GRACE_S)."""
        replica = self.node.replica
        if replica.is_ready_leader():
            self._unready_since = None
            return True
        now = asyncio.get_running_loop().time()
        if self._unready_since is None:
            self._unready_since = now
        other = replica.leader_id() not in (None, self.node.node_id)
        if self._waiters and (other or now - self._unready_since >= UNREADY_GRACE_S):
            self.abandon()
        return False

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def due_groups(self) -> list[tuple[tuple[str, ...], str | None, int]]:
        """(task_types, tenant, prefetch_ms) of the idle waiters, for the timer."""
        groups = {(w.claim.task_types, w.tenant, w.claim.prefetch_ms)
                  for w in self._waiters.values() if not w.busy}
        return sorted(groups, key=lambda g: (g[0], g[1] or "", g[2]))

    # -- a waiting request --
    async def wait(self, claim: ClaimRequest, wait_s: float, is_gone: Callable[[], bool],
                   completions: Completions | None = None
                   ) -> tuple[list[JsonObject], int | None]:
        """(claimed tasks, applied seq) within `wait_s`; `completions.results` is set before
        it returns. A watch (no completions) leases nothing: its tasks are READY once work
        is there. `claim.minimal`: the tasks as a worker needs them (present.claimed)."""
        assert not (claim.watch and completions and completions.cmds), "a watch carries nothing"
        if len(self._waiters) >= WAITERS_MAX:
            raise ApiError("unavailable", f"too many waiting claims (limit {WAITERS_MAX})",
                           {"limit": WAITERS_MAX})
        self._waiters.check_share(claim.worker_id, claim.tenant)
        loop = asyncio.get_running_loop()
        w = Waiter(claim, is_gone, loop.create_future(), id=next(self._ids),
                   completions=completions if completions and completions.cmds else None,
                   rid_base=None if claim.watch else claim.rid_base)
        self._waiters[w.id] = w
        deadline = loop.time() + wait_s
        try:
            await self._dispatch([w])  # claimable now: a Claim is on its way even if wait_s is 0
            if _uncarried(w):   # no Claim went now: they go alone, then it may (a freed slot)
                assert w.completions is not None, "an uncarried waiter has completions"
                await self._complete_alone(w.completions)
                await self._dispatch([w])
            if not w.busy and not w.future.done():
                await self._after_catching_up(w)
            if self.node.timer is not None:  # its task types may fall due later: re-arm
                self.node.timer.state_changed()
            # asyncio.wait, not wait_for: in Python 3.11 wait_for can raise TimeoutError for
            # a future that got its result in the same loop iteration, losing claimed tasks.
            await asyncio.wait({w.future}, timeout=max(0.0, deadline - loop.time()))
            if w.future.done():
                return w.future.result()     # raises NotLeader if leadership went
            if w.busy:  # its Claim is committing: the answer follows shortly
                w.expired = True
                return await w.future
            return [], None
        finally:
            if not w.busy:
                self._waiters.discard(w.id)

    async def _after_catching_up(self, w: Waiter) -> None:
        """Read-your-writes for claims: nothing was claimable in this leader's applied state,
        but a task written (and acknowledged, by any node) before the claim arrived may be
        committed and not yet applied here. Look again once it is applied."""
        if await self.node.replica.applied_index.catch_up(CATCH_UP_WAIT_S_MAX):
            await self._dispatch([w])

    # -- the dispatcher --
    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._dispatch()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("event=claim_dispatch_failed")

    def _ready(self, candidates: Iterable[Waiter]) -> list[Waiter]:
        """Idle waiters with claimable work, at most the kind's fan-out of each kind; and
        retried waiters whose next Claim is in the request table (its answer was lost)."""
        candidates = [w for w in candidates if not w.busy and not w.future.done()]
        replays = self._replays(candidates)
        kinds: dict[Kind, list[Waiter]] = {}
        for w in candidates:
            if not w.blocked and w not in replays:
                kinds.setdefault(_kind(w), []).append(w)
        if not kinds:
            return replays
        in_flight: dict[Kind, int] = {}    # Claims of a kind not yet answered count too
        for w in self._waiters.values():
            if w.busy:
                in_flight[_kind(w)] = in_flight.get(_kind(w), 0) + 1
        now = self.node.clock.now_ms()
        ready = []
        with self.node.replica.read() as sm:
            for kind, waiters in kinds.items():
                types, tenant, prefetch_ms, prio, weights = kind
                room = self._fanout.get(kind, 1) - in_flight.get(kind, 0)
                # a watch takes room like a Claim: its router claims right after
                if room > 0 and sm.has_claimable(types, tenant, prefetch_ms, now, prio, weights):
                    ready += waiters[:room]
        return replays + ready

    def _replays(self, candidates: list[Waiter]) -> list[Waiter]:
        keyed = [w for w in candidates if w.rid_base is not None]
        if not keyed:
            return []
        with self.node.replica.read() as sm:
            return [w for w in keyed if sm.knows_request(w.peek_request_id())]

    async def _dispatch(self, candidates: list[Waiter] | None = None) -> None:
        """Propose Claims for the ready waiters; never awaits, so it runs atomically."""
        if not self._waiters or not self.check_leadership():
            return
        ready = []
        for w in self._ready(self._waiters.values() if candidates is None else candidates):
            if w.watch:      # work is there: the watch has its answer
                w.future.set_result((READY, None))
                self._waiters.discard(w.id)
            else:
                ready.append(w)
        if not ready:
            return
        now = self.node.clock.now_ms()
        cmds: list[c.Command] = []
        minimal: list[bool] = []
        for w in ready:
            if _uncarried(w):
                assert w.completions is not None, "an uncarried waiter has completions"
                w.carried = len(w.completions.cmds)
                cmds += w.completions.cmds
                minimal += [w.completions.minimal] * w.carried
            minimal.append(w.minimal)
            cl = w.claim
            cmds.append(c.Claim(request_id=w.next_request_id(), now_ms=now,
                                worker_id=cl.worker_id, task_types=cl.task_types,
                                max_tasks=cl.max_tasks, lease_ms=cl.lease_ms,
                                prefetch_ms=cl.prefetch_ms, tenant=cl.tenant,
                                priority_min=cl.priorities[0], priority_max=cl.priorities[1],
                                tier_weights=cl.tier_weights))
            w.busy = True
        self.stats.proposed += len(ready)
        asyncio.get_running_loop().create_task(
            self._commit(ready, cmds, minimal if any(minimal) else False))

    async def _complete_alone(self, completions: Completions) -> None:
        completions.results = []         # taken: no Claim carries them any more
        answers, _ = await _propose_all(self.node, completions.cmds, completions.minimal)
        completions.results = [render_item(a) for a in cast(list[ItemAnswer], answers)]

    async def _commit(self, ready: list[Waiter], cmds: list[c.Command],
                      minimal: bool | list[bool]) -> None:
        all_answers, seq = await _propose_all(self.node, cmds, minimal)
        answers: list[Answer] = []
        pos = 0
        for w in ready:       # each waiter's carried completions, then its Claim
            if w.carried:
                assert w.completions is not None, "a waiter carries only its own completions"
                carried = cast(list[ItemAnswer], all_answers[pos:pos + w.carried])
                w.completions.results = [render_item(a) for a in carried]
                pos, w.carried = pos + w.carried, 0
            answers.append(all_answers[pos])
            pos += 1
        self._maybe_crash_after_claim(answers)
        releases: list[tuple[str, int]] = []
        for w, answer in zip(ready, answers):
            w.busy = False
            got = w.still_its(answer) if isinstance(answer, list) else []
            if w.abandoned and not got:
                if not w.future.done():
                    w.future.set_exception(NotLeader())
                self._waiters.discard(w.id)
            elif got and (w.future.done() or w.is_gone()):
                releases += [(t["task_id"], t["fencing_token"]) for t in got]
                self._waiters.discard(w.id)
            elif got or (w.expired and not w.future.done()):
                w.future.set_result((got, seq))
                self._waiters.discard(w.id)
            elif not isinstance(answer, ApiError):
                w.blocked = True   # has_claimable said yes, the Claim found nothing
        self._adapt_fanout(ready, answers)
        if releases:
            await release(self.node, releases)
        # Claims may have left work behind (max_tasks reached, other waiters).
        self.wake(new_work=False)


    def _maybe_crash_after_claim(self, answers: list[Answer]) -> None:
        failpoints = self.node.replica.failpoints
        if failpoints.on("crash_after_claim") and any(isinstance(a, list) and a for a in answers):
            failpoints.crash_once("a Claim committed, its answer not sent")

    def _adapt_fanout(self, ready: list[Waiter], answers: list[Answer]) -> None:
        tally: dict[Kind, list[int]] = {}     # kind -> [dispatched, full, got any]
        for w, answer in zip(ready, answers):
            got = len(answer) if isinstance(answer, list) else 0
            t = tally.setdefault(_kind(w), [0, 0, 0])
            t[0] += 1
            t[1] += got >= w.claim.max_tasks
            t[2] += got > 0
        for kind, (sent, full, some) in tally.items():
            self._fanout[kind] = min(FANOUT_MAX, 2 * max(sent, self._fanout.get(kind, 1))) \
                if full == sent else max(1, some)
        if len(self._fanout) > WAITERS_MAX:   # forget kinds nobody waits for
            live = {_kind(w) for w in self._waiters.values()}
            self._fanout = {k: v for k, v in self._fanout.items() if k in live}


def _uncarried(w: Waiter) -> bool:
    return w.completions is not None and w.completions.results is None and not w.carried


async def _propose_all(node: Proposing, cmds: list[c.Command],
                       minimal: bool | list[bool] = False) -> tuple[list[Answer], int | None]:
    """One answer per command; a failed proposal answers each with its error."""
    try:
        return await propose(node, cmds, minimal=minimal)
    except ApiError as e:
        return [e] * len(cmds), None


def render_item(answer: JsonObject | ApiError) -> JsonObject:
    """A batch item's answer: the rendered task, or the error object."""
    return answer.body() if isinstance(answer, ApiError) else answer


def _kind(w: Waiter) -> Kind:
    return w.claim.kind()


async def release(node: HubServices, tasks: list[tuple[str, int]]) -> None:
    """Give claimed tasks back because nobody will receive them."""
    now = node.clock.now_ms()
    cmds = [c.Release(request_id=_new_id(), now_ms=now, task_id=tid, fencing_token=tok)
            for tid, tok in tasks]
    try:
        await propose(node, cmds)
        log.info("event=claims_released node=%s count=%d", node.node_id, len(cmds))
    except ApiError as e:
        # Not fatal: the leases expire and the tasks are dispatched again.
        log.warning("event=release_failed node=%s code=%s", node.node_id, e.code)
    if node.claims is not None:
        node.claims.stats.released += len(cmds)
