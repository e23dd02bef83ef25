"""Claims gathered across shards (DESIGN.md section 13).

A claim first asks the shards one after another without waiting, the shard with the most
urgent work first (heads.py: it reads every shard's head at once), until it has
`max_tasks` or has asked them all; among equally urgent shards it starts at a shard that
moves on with every claim so that no shard starves. It skips a shard where a watch of the
same work (task types, prefetch, scope; any worker's) is open: that watch would have
answered if the shard had such work, so the ask would come back empty (at S = 4, 254 of
590 claim requests at the shards did). With nothing found it *watches* every shard at once, in rounds of at most
`SHARD_WAIT_S`: a watch waits like a claim but leases nothing (node/scheduling/claims.py), and is
answered `ready` when a claim of its kind would find work there; the claim then asks that
shard without waiting. So while a claim waits on S shards no shard leases anything for it
that it may not deliver (claiming at every shard at once leased tasks at several, and all
but one shard's were given back: one task in six at S = 4). The watches still open when the
worker has been answered are adopted by its next claim of the same kind (a worker keeps one
watch per shard, not one per claim). A task a shard answers with anyway (a node that does
not know watches), beyond `max_tasks` or for a request that is gone, is released at once
(a release is not an attempt). No lease is ever left without a holder.
"""
from __future__ import annotations

import asyncio
import logging

import orjson
from aiohttp import web

from tsched.node.api import claim_parsing, validate
from tsched.node.errors import ApiError
from tsched.node.api.claim_parsing import WATCH_HEADER
from tsched.node.scheduling.claim_request import ClaimRequest
from tsched.node.shards import heads
from tsched.node.shards.router import (PREFERENCE_APPLIED, ROUTER, Relayed, Router, applied_preferences,
                     json_response)
from tsched.node.shards.keyed_routes import group_by_task, split_by_task

log = logging.getLogger("tsched.node.router")

routes = web.RouteTableDef()

SHARD_WAIT_S = 5.0        # one round of waiting on every shard; a worker's wait_s spans rounds
ANSWER_MARGIN_S = 10.0    # a shard's long poll may take its wait plus a forward to its leader
FAILED_ROUND_S = 0.2
# A watch said ready but the claim that followed found nothing (another claim took the
# work first): the shard is watched again after a pause, not at once in a tight loop; the
# pause doubles while that repeats within a round (a shard whose idea of claimable work
# and its claims disagree costs a few requests a second, not a loop).
REWATCH_PAUSE_S = 0.02
REWATCH_PAUSE_S_MAX = 1.0
ROTATE_EVERY = 4          # every 4th claim starts at the next shard in turn
PRODUCTIVE_KINDS_MAX = 10_000      # a round of waiting that ended sooner found every shard failing
APPLIED = "tsched.preference_applied"   # request key: a shard's claim answer applied `Prefer`


class Gathered:
    def __init__(self, max_tasks: int) -> None:
        self.max_tasks = max_tasks
        self.tasks: list[dict] = []
        self.surplus: list[tuple[int, dict]] = []
        self.seqs: dict[str, int] = {}

    @property
    def room(self) -> int:
        return self.max_tasks - len(self.tasks)

    def take(self, r: Router, shard: int, doc: object) -> None:
        if not isinstance(doc, dict):
            return
        if "applied_seq" in doc:
            self.seqs[str(shard)] = doc["applied_seq"]
        for t in doc.get("tasks") or ():
            t["shard"] = shard
            r.remember(t["task_id"], shard)
            if self.room > 0:
                self.tasks.append(t)
            else:
                self.surplus.append((shard, t))


@routes.post("/v1/claims")
async def claim(request: web.Request) -> web.Response:
    r: Router = request.app[ROUTER]
    validate.query(request.query, ())
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise validate.invalid(f"body is not valid JSON: {e}") from None
    req = claim_parsing.claim(body, r.cfg.tiers)   # refused before any shard is asked
    carried = body.pop("completions", None)
    headers: dict[str, str] = {}
    if carried:
        done = await _carried(r, request, carried)
        if done.status != 200:
            return done
        assert isinstance(done.body, bytes), "_carried answers with JSON bytes"
        carried = orjson.loads(done.body)["results"]
        headers = applied_preferences(done)
    scope = r.scope(request)
    kind = _kind(req, scope)
    shards = [r.tenant_shard(scope)] if scope is not None else _order(r, kind)
    got = Gathered(req.max_tasks)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + req.wait_s
    # without waiting, one shard after another, the most urgent first (heads.py); not
    # where a watch of this work is still open (no work there yet)
    asks = [s for s in shards if not _watched(r, kind, s)]
    await heads.ask_in_order(r, request, asks, body, req,
                             _Asks(r, request, kind, got), read=scope is None)
    while not got.tasks and loop.time() < deadline and not _gone(request):
        round_start = loop.time()
        wait = min(SHARD_WAIT_S, deadline - loop.time())
        await _wait_all(r, request, shards, body, got, wait, kind)
        if not got.tasks and loop.time() - round_start < FAILED_ROUND_S:
            # every shard answered at once with nothing (unavailable, or refusing): do
            # not spin; ask again shortly
            await asyncio.sleep(min(FAILED_ROUND_S, max(0.0, deadline - loop.time())))
    if _gone(request):
        got.surplus += [(t["shard"], t) for t in got.tasks]
        got.tasks = []
    if got.surplus:
        await _release(r, request, got.surplus)
    answer = {"tasks": got.tasks, "applied_seqs": got.seqs}
    if carried is not None:
        answer["completions"] = carried
    if APPLIED in request:      # the shards rendered the tasks minimally
        headers[PREFERENCE_APPLIED] = request[APPLIED]
    return json_response(answer, headers=headers)


async def _carried(r: Router, request: web.Request, items: list) -> web.Response:
    """Completions carried on a claim, applied by their tasks' shards before any shard is
    asked for work (as `POST /v1/completions` would apply them), answered in their order.
    Validated already, so every item has a task id."""
    grouped = await group_by_task(r, request, items)
    assert grouped is not None, "claim_parsing.claim checked every completion"
    groups, missing = grouped
    return await split_by_task(request, r, groups, missing, "completions", items,
                               path="/v1/completions")


class _Asks:
    """A claim's asks without waiting, for heads.ask_in_order."""

    def __init__(self, r: Router, request: web.Request, kind: tuple, got: Gathered) -> None:
        self.r, self.request, self.kind, self.got = r, request, kind, got

    async def ask(self, shard: int, sub: dict) -> int:
        """Ask `shard` with the claim body `sub`; how many tasks it gave."""
        had = len(self.got.tasks)
        self.take(shard, await _ask(self.r, self.request, shard, sub, self.got.room, 0))
        return len(self.got.tasks) - had

    def take(self, shard: int, doc: object) -> None:
        _take_claimed(self.r, self.kind, self.got, shard, doc)

    def room(self) -> int:
        return self.got.room


def _order(r: Router, kind: tuple) -> list[int]:
    """The shards in the order a claim asks them: the one that last gave this kind of
    claim tasks first (where the work is, without asking empty shards first), except on
    every ROTATE_EVERY-th claim, which starts at the next shard in turn, so that no shard
    waits long behind a busy one."""
    first = r.rotation % r.count
    r.rotation += 1
    order = [(first + i) % r.count for i in range(r.count)]
    hot = r.productive.get(kind)
    if hot is not None and r.rotation % ROTATE_EVERY:
        order.remove(hot)
        order.insert(0, hot)
    return order


def _remember_productive(r: Router, kind: tuple, shard: int) -> None:
    r.productive[kind] = shard
    if len(r.productive) > PRODUCTIVE_KINDS_MAX:     # forget the oldest kinds
        for key in list(r.productive)[:len(r.productive) // 2]:
            del r.productive[key]


def _gone(request: web.Request) -> bool:
    return request.transport is None or request.transport.is_closing()


async def _ask(r: Router, request: web.Request, shard: int, body: dict, room: int, wait_s: float,
               watch: bool = False) -> object:
    sub = dict(body, max_tasks=room, wait_s=round(wait_s, 3))
    try:
        a = await r.send(request, shard, "POST", "/v1/claims", orjson.dumps(sub),
                         timeout_s=wait_s + ANSWER_MARGIN_S,
                         extra_headers={WATCH_HEADER: "1"} if watch else None,
                         to_leader=True)
    except ApiError as e:
        log.info("event=claim_shard_unavailable shard=%d code=%s", shard, e.code)
        return None
    if a.status != 200:
        if 400 <= a.status < 500 and a.status != 429:
            raise Relayed(a)    # refused for a reason every shard shares (auth, limits)
        return None
    if PREFERENCE_APPLIED in a.headers and not watch:
        request[APPLIED] = a.headers[PREFERENCE_APPLIED]
    return a.json()


class Poll:
    """One watch of one shard for one kind of claim (worker, task types, lease, prefetch,
    scope). A poll outlives the claim that started it: the worker's next claim of the same
    kind adopts it instead of opening another waiter at that shard; a task a poll brings
    anyway while no claim holds it is released."""

    def __init__(self, shard: int, future: asyncio.Future) -> None:
        self.shard, self.future = shard, future
        self.owner: Gathered | None = None
        self.taken = False      # its answer went to a claim


def _kind(req: ClaimRequest, scope: str | None) -> tuple:
    return (req.worker_id, req.task_types, req.lease_ms, req.prefetch_ms, scope,
            req.priorities, req.tier_weights)


def _work(kind: tuple) -> tuple:
    """What a shard's having work for a claim depends on: task types, prefetch, scope,
    priority range, tier weights (every worker of those drains the same queue)."""
    return (kind[1], kind[3], kind[4]) + kind[5:]


def _watched(r: Router, kind: tuple, shard: int) -> bool:
    return r.watching.get(_work(kind), {}).get(shard, 0) > 0


def _count_watch(r: Router, kind: tuple, shard: int, delta: int) -> None:
    by_shard = r.watching.setdefault(_work(kind), {})
    n = by_shard.get(shard, 0) + delta
    if n > 0:
        by_shard[shard] = n
    else:
        by_shard.pop(shard, None)
        if not by_shard:
            del r.watching[_work(kind)]


async def _wait_all(r: Router, request: web.Request, shards: list[int], body: dict, got: Gathered,
                    wait_s: float, kind: tuple) -> None:
    """Watch every shard at once (adopting this kind's polls still open) and claim at a
    shard whose watch says ready, until tasks come or the round ends; polls still open
    then stay for the next claim of the kind."""
    loop = asyncio.get_running_loop()
    end = loop.time() + wait_s
    mine = [_watch(r, request, s, body, got, wait_s, kind) for s in shards]
    pending = {p.future for p in mine}
    pause_s = REWATCH_PAUSE_S
    try:
        while pending and not got.tasks:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            ready = _take_done(r, mine, got, kind)
            for s in ready:
                if got.room > 0:
                    _take_claimed(r, kind, got, s,
                                  await _ask(r, request, s, body, got.room, 0))
            if got.tasks or not ready or _gone(request):
                continue
            await asyncio.sleep(min(pause_s, max(0.0, end - loop.time())))
            pause_s = min(2 * pause_s, REWATCH_PAUSE_S_MAX)
            left = end - loop.time()
            if left > 0:        # the work went elsewhere first: watch those shards again
                again = [_watch(r, request, s, body, got, left, kind) for s in ready]
                mine += again
                pending |= {p.future for p in again}
    finally:
        _take_done(r, mine, got, kind)
        for p in mine:
            if p.owner is got:
                p.owner = None


def _watch(r: Router, request: web.Request, shard: int, body: dict, got: Gathered, wait_s: float,
           kind: tuple) -> Poll:
    """This kind's open watch of `shard` (adopted by `got`), or a new one."""
    open_polls = r.polls.setdefault(kind, [])
    poll = next((p for p in open_polls if p.shard == shard and p.owner is None
                 and not p.future.done()), None)
    if poll is None:
        poll = Poll(shard, asyncio.ensure_future(
            _ask(r, request, shard, body, got.max_tasks, wait_s, watch=True)))
        def done(_future: asyncio.Future, p: Poll = poll) -> None:
            _poll_done(r, kind, p, request)
        poll.future.add_done_callback(done)
        open_polls.append(poll)
        _count_watch(r, kind, shard, 1)
    poll.owner = got
    return poll


def _take_claimed(r: Router, kind: tuple, got: Gathered, shard: int, doc: object) -> None:
    had = len(got.tasks)
    got.take(r, shard, doc)
    if len(got.tasks) > had:
        _remember_productive(r, kind, shard)


def _take_done(r: Router, polls: list[Poll], got: Gathered, kind: tuple) -> list[int]:
    """Take the answers of the polls that ended; the shards whose watch said ready."""
    ready = []
    for p in polls:
        if p.future.done() and p.owner is got and not p.taken:
            p.taken = True
            doc = _result(p.future)
            _take_claimed(r, kind, got, p.shard, doc)
            if isinstance(doc, dict) and doc.get("ready") is True:
                ready.append(p.shard)
    return ready


def _result(future: asyncio.Future[object]) -> object:
    if future.cancelled() or future.exception() is not None:
        return None
    return future.result()


def _poll_done(r: Router, kind: tuple, poll: Poll, request: web.Request) -> None:
    """A poll ended: forget it; release what it brought if no claim holds it."""
    _count_watch(r, kind, poll.shard, -1)
    polls = r.polls.get(kind)
    if polls is not None:
        polls[:] = [p for p in polls if p is not poll]
        if not polls:
            r.polls.pop(kind, None)
    if poll.owner is None and not poll.taken:
        poll.taken = True
        doc = _result(poll.future)
        if isinstance(doc, dict) and doc.get("tasks"):
            late = Gathered(0)
            late.take(r, poll.shard, doc)
            asyncio.ensure_future(_release(r, request, late.surplus))


async def _release(r: Router, request: web.Request, tasks: list[tuple[int, dict]]) -> None:
    async def one(shard: int, t: dict) -> None:
        path = f"/v1/tasks/{t['task_id']}/release"
        try:
            a = await r.send(request, shard, "POST", path,
                             orjson.dumps({"fencing_token": t["fencing_token"]}))
            ok = a.status == 200
        except ApiError:
            ok = False
        if not ok:   # its lease expires and it is dispatched again
            log.warning("event=release_failed shard=%d task=%s", shard, t["task_id"])
    await asyncio.gather(*(one(s, t) for s, t in tasks))
    log.info("event=claims_released count=%d", len(tasks))
