"""Long-poll claims (DESIGN.md section 4).

At the leader, `ClaimHub` keeps the waiting claims. Its dispatcher wakes when an applied
batch may have made work claimable (or the timer says a task fell due), asks
`sm.has_claimable` for each idle waiter, and proposes one `Claim` per ready waiter in one
batch; the state machine picks the tasks at apply time, so two waiters never share a task.
A waiter whose HTTP connection is gone when its claim commits gets its tasks released.
Elsewhere, `claim()` forwards the request to the leader and follows leader changes.

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
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from typing import Callable

import orjson

from tsched.statemachine import commands as c

from tsched.node.errors import STATUS_BY_CODE, ApiError
from tsched.node.ids import new_id as _new_id

log = logging.getLogger("tsched.node.claims")

WAITERS_MAX = 10_000
# One worker id keeps a couple of long polls open (the Worker runtime: two); one tenant's
# token may not take the waiting room from the others.
WAITERS_PER_WORKER_MAX = 16
WAITERS_PER_TENANT_MAX = 2_500
# Waiters of one kind (task types, tenant, prefetch) dispatched per round: starts at one and
# doubles while every Claim comes back full, so one submit does not wake a whole herd of
# idle workers into empty Claims, while a backlog still gets drained by many at once.
FANOUT_MAX = 256
LEADER_WAIT_S = 0.1        # pause before asking again who leads, while there is no leader
# A leader that briefly loses sight of its quorum (a slow tick under load) keeps its waiters;
# one that has not been the ready leader for this long hands them back.
UNREADY_GRACE_S = 2.0
FORWARD_MARGIN_S = 5.0     # a forwarded wait's HTTP timeout beyond its wait_s
KEY_HEADER = "Idempotency-Key"
WATCH_HEADER = "X-Tsched-Claim-Watch"


class _Ready(list):
    """The answer of a watch whose kind of claim would find work (an empty task list)."""


READY = _Ready()

# Commands whose application can make a task claimable (a new or returned task, a freed
# tenant slot, time passing). A batch of only Claims/Heartbeats/Barriers cannot.
_ENABLING = (c.SubmitTask, c.Fail, c.Release, c.Replay, c.Complete, c.Cancel, c.Tick, c.Fire,
             c.SetTenant)


def enables_claims(cmds) -> bool:
    return any(isinstance(cmd, _ENABLING) for cmd in cmds)


class NotLeader(Exception):
    """This node stopped leading while a claim waited here."""


@dataclass(eq=False)
class Completions:
    """The completions a claim carries (DESIGN.md section 7): proposed at once, in the same
    batch as the waiter's first Claim and before it when the waiter is dispatched at once,
    else alone (the waiter is then dispatched as any other: a Claim for every carrier,
    claimable work or not, made a storm of small Claims under a trickle of due tasks). So a
    worker finishing a batch and asking for the next costs one round trip, and mostly one
    Raft entry."""

    cmds: list                       # Complete / Fail commands, in request order
    results: list | None = None      # one rendered task or error object per command
    minimal: bool = False            # `Prefer: return=minimal`: each answered by id and state


@dataclass(eq=False)
class Waiter:
    params: dict            # validate.claim() output
    tenant: str | None
    is_gone: Callable[[], bool]
    future: asyncio.Future
    busy: bool = False      # a Claim for it is being committed
    expired: bool = False   # its wait ended while busy: answer whatever the Claim brings
    abandoned: bool = False  # leadership went while its Claim was in flight
    blocked: bool = False   # its last Claim came back empty: wait for new work first
    id: int = 0
    completions: Completions | None = None   # not yet proposed while `.results` is None
    carried: int = 0        # completion commands proposed ahead of its Claim in flight
    rid_base: str | None = None   # from the client's Idempotency-Key: retries replay Claims
    claims_made: int = 0
    watch: bool = False     # answered READY when work is claimable; proposes no Claim
    minimal: bool = False   # `Prefer: return=minimal`: its tasks as a worker needs them

    def peek_request_id(self) -> str:
        return f"{self.rid_base}.{self.claims_made}"

    def next_request_id(self) -> str:
        if self.rid_base is None:
            return _new_id()
        rid = self.peek_request_id()
        self.claims_made += 1
        return rid

    def still_its(self, tasks: list[dict]) -> list[dict]:
        """A replayed Claim's tasks that are still leased to this worker id."""
        me = self.params["worker_id"]
        return [t for t in tasks if t.get("state") == "running" and t.get("worker_id") == me]


class _WaiterTable(dict):
    """Waiters by id, counting them per worker id and per tenant scope as they come and go
    (only item assignment and `pop` are used on it)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_worker: dict[str, int] = {}
        self.by_tenant: dict[str, int] = {}

    def check_share(self, worker_id: str, tenant: str | None) -> None:
        if self.by_worker.get(worker_id, 0) >= WAITERS_PER_WORKER_MAX:
            raise ApiError("tenant_limit", f"worker {worker_id!r} already has "
                           f"{WAITERS_PER_WORKER_MAX} waiting claims",
                           {"limit": WAITERS_PER_WORKER_MAX, "worker_id": worker_id})
        if tenant is not None and self.by_tenant.get(tenant, 0) >= WAITERS_PER_TENANT_MAX:
            raise ApiError("tenant_limit", f"tenant {tenant!r} already has "
                           f"{WAITERS_PER_TENANT_MAX} waiting claims",
                           {"limit": WAITERS_PER_TENANT_MAX, "tenant": tenant})

    def __setitem__(self, key: int, w: "Waiter") -> None:
        if key in self:
            raise KeyError(f"waiter {key} is already registered")
        super().__setitem__(key, w)
        _count(self.by_worker, w.params["worker_id"], 1)
        if w.tenant is not None:
            _count(self.by_tenant, w.tenant, 1)

    def pop(self, key: int, *default):
        if key not in self:
            return super().pop(key, *default)
        w = super().pop(key)
        _count(self.by_worker, w.params["worker_id"], -1)
        if w.tenant is not None:
            _count(self.by_tenant, w.tenant, -1)
        return w


def _count(counts: dict[str, int], key: str, delta: int) -> None:
    n = counts.get(key, 0) + delta
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)


@dataclass
class _Stats:
    proposed: int = 0
    released: int = 0


class ClaimHub:
    def __init__(self, node) -> None:
        self.node = node
        self._waiters = _WaiterTable()
        self._ids = itertools.count(1)
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._fanout: dict[tuple, int] = {}
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
            self._waiters.pop(w.id, None)

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
        groups = {_kind(w) for w in self._waiters.values() if not w.busy}
        return sorted(groups, key=lambda g: (g[0], g[1] or "", g[2]))

    # -- a waiting request --
    async def wait(self, params: dict, tenant: str | None, is_gone: Callable[[], bool],
                   completions: Completions | None = None, rid_base: str | None = None,
                   watch: bool = False, minimal: bool = False
                   ) -> tuple[list[dict], int | None]:
        """(claimed tasks, applied seq); `completions.results` is set before it returns.
        A watch (no completions) leases nothing: its tasks are READY once work is there.
        `minimal`: the tasks rendered as a worker needs them (present.claimed)."""
        assert not (watch and completions and completions.cmds), "a watch carries nothing"
        if len(self._waiters) >= WAITERS_MAX:
            raise ApiError("unavailable", f"too many waiting claims (limit {WAITERS_MAX})",
                           {"limit": WAITERS_MAX})
        self._waiters.check_share(params["worker_id"], tenant)
        loop = asyncio.get_running_loop()
        w = Waiter(params, tenant, is_gone, loop.create_future(), id=next(self._ids),
                   completions=completions if completions and completions.cmds else None,
                   rid_base=None if watch else rid_base, watch=watch, minimal=minimal)
        self._waiters[w.id] = w
        try:
            await self._dispatch([w])  # claimable now: a Claim is on its way even if wait_s is 0
            if _uncarried(w):   # no Claim went now: they go alone, then it may (a freed slot)
                await self._complete_alone(w.completions)
                await self._dispatch([w])
            if self.node.timer is not None:  # its task types may fall due later: re-arm
                self.node.timer.state_changed()
            # asyncio.wait, not wait_for: in Python 3.11 wait_for can raise TimeoutError for
            # a future that got its result in the same loop iteration, losing claimed tasks.
            await asyncio.wait({w.future}, timeout=params["wait_s"])
            if w.future.done():
                return w.future.result()     # raises NotLeader if leadership went
            if w.busy:  # its Claim is committing: the answer follows shortly
                w.expired = True
                return await w.future
            return [], None
        finally:
            if not w.busy:
                self._waiters.pop(w.id, None)

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

    def _ready(self, candidates) -> list[Waiter]:
        """Idle waiters with claimable work, at most the kind's fan-out of each kind; and
        retried waiters whose next Claim is in the request table (its answer was lost)."""
        candidates = [w for w in candidates if not w.busy and not w.future.done()]
        replays = self._replays(candidates)
        kinds: dict[tuple, list[Waiter]] = {}
        for w in candidates:
            if not w.blocked and w not in replays:
                kinds.setdefault(_kind(w), []).append(w)
        if not kinds:
            return replays
        in_flight: dict[tuple, int] = {}    # Claims of a kind not yet answered count too
        for w in self._waiters.values():
            if w.busy:
                in_flight[_kind(w)] = in_flight.get(_kind(w), 0) + 1
        now = self.node.clock.now_ms()
        ready = []
        with self.node.replica.read() as sm:
            for kind, waiters in kinds.items():
                types, tenant, prefetch_ms = kind
                room = self._fanout.get(kind, 1) - in_flight.get(kind, 0)
                # a watch takes room like a Claim: its router claims right after
                if room > 0 and sm.has_claimable(types, tenant, prefetch_ms, now):
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
                self._waiters.pop(w.id, None)
            else:
                ready.append(w)
        if not ready:
            return
        now = self.node.clock.now_ms()
        cmds, minimal = [], []
        for w in ready:
            if _uncarried(w):
                w.carried = len(w.completions.cmds)
                cmds += w.completions.cmds
                minimal += [w.completions.minimal] * w.carried
            minimal.append(w.minimal)
            cmds.append(c.Claim(request_id=w.next_request_id(), now_ms=now,
                                worker_id=w.params["worker_id"],
                                task_types=w.params["task_types"], max_tasks=w.params["max_tasks"],
                                lease_ms=w.params["lease_ms"], prefetch_ms=w.params["prefetch_ms"],
                                tenant=w.tenant))
            w.busy = True
        self.stats.proposed += len(ready)
        asyncio.get_running_loop().create_task(
            self._commit(ready, cmds, minimal if any(minimal) else False))

    async def _complete_alone(self, completions: Completions) -> None:
        completions.results = []         # taken: no Claim carries them any more
        answers, _ = await _propose_all(self.node, completions.cmds, completions.minimal)
        completions.results = [render_item(a) for a in answers]

    async def _commit(self, ready: list[Waiter], cmds: list, minimal: bool | list[bool]
                      ) -> None:
        all_answers, seq = await _propose_all(self.node, cmds, minimal)
        answers, pos = [], 0
        for w in ready:       # each waiter's carried completions, then its Claim
            if w.carried:
                w.completions.results = [render_item(a) for a in all_answers[pos:pos + w.carried]]
                pos, w.carried = pos + w.carried, 0
            answers.append(all_answers[pos])
            pos += 1
        self._maybe_crash_after_claim(answers)
        releases = []
        for w, answer in zip(ready, answers):
            w.busy = False
            got = w.still_its(answer) if isinstance(answer, list) else []
            if w.abandoned and not got:
                if not w.future.done():
                    w.future.set_exception(NotLeader())
                self._waiters.pop(w.id, None)
            elif got and (w.future.done() or w.is_gone()):
                releases += [(t["task_id"], t["fencing_token"]) for t in got]
                self._waiters.pop(w.id, None)
            elif got or (w.expired and not w.future.done()):
                w.future.set_result((got, seq))
                self._waiters.pop(w.id, None)
            elif not isinstance(answer, ApiError):
                w.blocked = True   # has_claimable said yes, the Claim found nothing
        self._adapt_fanout(ready, answers)
        if releases:
            await release(self.node, releases)
        # Claims may have left work behind (max_tasks reached, other waiters).
        self.wake(new_work=False)


    def _maybe_crash_after_claim(self, answers: list) -> None:
        failpoints = self.node.replica.failpoints
        if failpoints.on("crash_after_claim") and any(isinstance(a, list) and a for a in answers):
            failpoints.crash_once("a Claim committed, its answer not sent")

    def _adapt_fanout(self, ready: list[Waiter], answers: list) -> None:
        tally: dict[tuple, list[int]] = {}     # kind -> [dispatched, full, got any]
        for w, answer in zip(ready, answers):
            got = len(answer) if isinstance(answer, list) else 0
            t = tally.setdefault(_kind(w), [0, 0, 0])
            t[0] += 1
            t[1] += got >= w.params["max_tasks"]
            t[2] += got > 0
        for kind, (sent, full, some) in tally.items():
            self._fanout[kind] = min(FANOUT_MAX, 2 * sent) if full == sent else max(1, some)
        if len(self._fanout) > WAITERS_MAX:   # forget kinds nobody waits for
            live = {_kind(w) for w in self._waiters.values()}
            self._fanout = {k: v for k, v in self._fanout.items() if k in live}


def _uncarried(w: Waiter) -> bool:
    return w.completions is not None and w.completions.results is None and not w.carried


async def _propose_all(node, cmds: list, minimal: bool | list[bool] = False
                       ) -> tuple[list, int | None]:
    """One answer per command; a failed proposal answers each with its error."""
    from tsched.node.api.proposing import propose
    try:
        return await propose(node, cmds, minimal=minimal)
    except ApiError as e:
        return [e] * len(cmds), None


def render_item(answer) -> dict:
    """A batch item's answer: the rendered task, or the error object."""
    return answer.body() if isinstance(answer, ApiError) else answer


def _kind(w: Waiter) -> tuple:
    return (w.params["task_types"], w.tenant, w.params["prefetch_ms"])


async def release(node, tasks: list[tuple[str, int]]) -> None:
    """Give claimed tasks back because nobody will receive them."""
    from tsched.node.api.proposing import propose
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


# --- the request, on any node -------------------------------------------------------------

async def claim(node, request, params: dict, tenant: str | None, body: bytes,
                completions: Completions | None = None, minimal: bool = False
                ) -> tuple[list[dict], int]:
    """Claim at the leader, wherever that is, within params['wait_s']. `completions` (the
    request's, if any) get their `results` set, or the claim fails with `timeout`.
    `minimal`: the tasks as a worker needs them (a follower forwards the preference)."""
    tasks, seq = await _claim(node, request, params, tenant, body, completions, minimal)
    if completions is not None and completions.results is None:
        # Forwarded, but no leader answered: they may or may not have been applied.
        raise ApiError("timeout", "the completions were not answered in time",
                       {"outcome": "unknown"})
    return tasks, seq


async def _claim(node, request, params: dict, tenant: str | None, body: bytes,
                 completions: Completions | None, minimal: bool
                 ) -> tuple[list[dict], int]:
    from tsched.node.api.proposing import request_id
    loop = asyncio.get_running_loop()
    deadline = loop.time() + params["wait_s"]
    forwarded = bool(request.headers.get("X-Tsched-Forwarded"))
    watch = is_watch(request)
    rid_base = request_id(request, "#claim") if request.headers.get(KEY_HEADER) else None
    is_gone = lambda: request.transport is None or request.transport.is_closing()  # noqa: E731
    leader_seen = False
    while True:
        if node.stopping:
            raise ApiError("unavailable", "this node is stopping", {"node": node.node_id})
        remaining = max(0.0, deadline - loop.time())
        replica = node.replica
        leader = replica.leader_id()
        if leader == node.node_id and replica.is_ready_leader():
            leader_seen = True
            try:
                tasks, seq = await node.claims.wait(dict(params, wait_s=remaining), tenant,
                                                    is_gone, completions, rid_base, watch,
                                                    minimal)
                return tasks, seq if seq is not None else replica.applied_seq
            except NotLeader:
                if forwarded:
                    raise ApiError("no_leader", "this node stopped leading") from None
        elif forwarded and leader != node.node_id:
            # The sender thinks this node leads; it does not: let the sender look again.
            raise ApiError("no_leader", "this node is not the leader",
                           {"leader": leader})
        elif leader is not None and leader != node.node_id:
            leader_seen = True
            answer = await _unless_stopping(
                node, _forward(node, leader, params, remaining, body, request, completions))
            if answer is not None:
                return answer
        if loop.time() >= deadline:
            if leader_seen:
                return [], replica.applied_seq
            raise ApiError("no_leader", "no leader was reachable during the wait")
        await asyncio.sleep(min(LEADER_WAIT_S, max(0.0, deadline - loop.time())))


async def _unless_stopping(node, coro):
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


async def _forward(node, leader: str, params: dict, remaining: float, body: bytes, request,
                   completions: Completions | None = None):
    """The leader's answer as (tasks, seq); None if the leader could not serve it. The
    leader's answers to the completions go to `completions.results`."""
    payload = orjson.loads(body) if body else {}
    payload["wait_s"] = round(remaining, 3)
    if completions is not None and completions.results is not None:
        payload.pop("completions", None)     # answered already (by this node, as leader)
    try:
        status, raw = await node.forwarder.send(
            node.config.node(leader).url, "POST", "/v1/claims", orjson.dumps(payload),
            timeout_s=remaining + FORWARD_MARGIN_S,
            headers=_forwarded_headers(request))
    except ApiError:
        return None
    try:
        data = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return None   # not an answer of ours: treat the leader as unreachable
    if status == 200:
        if completions is not None and completions.results is None:
            completions.results = data.get("completions") or []
        seq = max(int(data.get("applied_seq") or 0), node.replica.applied_seq)
        if data.get("ready") is True and is_watch(request):
            return READY, seq
        tasks = data.get("tasks", [])
        if tasks and (request.transport is None or request.transport.is_closing()):
            await release(node, [(t["task_id"], t["fencing_token"]) for t in tasks])
            return [], node.replica.applied_seq
        return tasks, seq
    err = data.get("error") if isinstance(data, dict) else None
    if status >= 500 or not isinstance(err, dict) or err.get("code") not in STATUS_BY_CODE:
        return None
    raise ApiError(err["code"], str(err.get("message") or "the leader refused"),
                   err.get("details") if isinstance(err.get("details"), dict) else {})


FORWARDED_HEADERS = ("Authorization", KEY_HEADER, WATCH_HEADER, "Prefer")


def _forwarded_headers(request) -> dict[str, str]:
    """What the leader needs of the caller's headers: its token, its Idempotency-Key (the
    leader derives the Claims' request ids from it), whether it only watches, and how it
    wants its tasks and carried completions answered."""
    return {h: request.headers[h] for h in FORWARDED_HEADERS if h in request.headers}


def is_watch(request) -> bool:
    return request.headers.get(WATCH_HEADER) == "1"
