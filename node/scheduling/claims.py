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

A *head read* (the header `X-Tsched-Claim-Head: 1`, sent by the router to every shard
before it claims) neither waits nor leases: the leader answers `{"tasks": [], "head": N}`,
N the effective priority of the most urgent task a claim of its kind would take there
(null: none), so that the router asks the most urgent shard first (DESIGN.md 5.1, 13).

This module is the request's side, on any node (`claim()`: wait here as the leader, or
forward to it); the leader's hub is claim_hub.py and a waiter waiters.py.
"""
from __future__ import annotations

import asyncio

import orjson

from tsched.node.errors import ERROR_CODES, ApiError
from tsched.node.scheduling.claim_hub import ClaimHub, enables_claims, release, render_item
from tsched.node.scheduling.waiters import READY, Completions, NotLeader

# What the API's worker endpoints use of the claims, wherever it is kept.
__all__ = ["HEAD_HEADER", "READY", "ClaimHub", "Completions", "WATCH_HEADER", "claim",
           "enables_claims", "head", "is_head", "is_watch", "release", "render_item"]

LEADER_WAIT_S = 0.1        # pause before asking again who leads, while there is no leader
FORWARD_MARGIN_S = 5.0     # a forwarded wait's HTTP timeout beyond its wait_s
KEY_HEADER = "Idempotency-Key"
WATCH_HEADER = "X-Tsched-Claim-Watch"
HEAD_HEADER = "X-Tsched-Claim-Head"
HEAD_TIMEOUT_S = 5.0       # a head read forwarded to the leader: it never waits there


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
    from tsched.node.api.idempotency import request_id
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
    if status >= 500 or not isinstance(err, dict) or err.get("code") not in ERROR_CODES:
        return None
    raise ApiError(err["code"], str(err.get("message") or "the leader refused"),
                   err.get("details") if isinstance(err.get("details"), dict) else {})


FORWARDED_HEADERS = ("Authorization", KEY_HEADER, WATCH_HEADER, HEAD_HEADER, "Prefer")


def _forwarded_headers(request) -> dict[str, str]:
    """What the leader needs of the caller's headers: its token, its Idempotency-Key (the
    leader derives the Claims' request ids from it), whether it only watches, and how it
    wants its tasks and carried completions answered."""
    return {h: request.headers[h] for h in FORWARDED_HEADERS if h in request.headers}


def is_watch(request) -> bool:
    return request.headers.get(WATCH_HEADER) == "1"


def is_head(request) -> bool:
    return request.headers.get(HEAD_HEADER) == "1"


async def head(node, request, params: dict, tenant: str | None, body: bytes
               ) -> tuple[int | None, int]:
    """(the claim's head at the leader, applied seq): the effective priority of the most
    urgent task a claim of this kind would take now (None: none). Read at the leader (a
    follower asks it once); never waits, leases nothing."""
    replica = node.replica
    leader = replica.leader_id()
    if leader == node.node_id and replica.is_ready_leader():
        now = node.clock.now_ms()
        # A weighted claim takes from its tiers' ranges only: its head is their most urgent.
        ranges = [(lo, hi) for lo, hi, _ in params.get("tier_weights", ())]
        with replica.read() as sm:
            heads = [sm.claim_head(params["task_types"], tenant, params["prefetch_ms"], now, r)
                     for r in ranges or [params.get("priorities", (0, 10))]]
        found = min((h for h in heads if h is not None), default=None)
        return found, replica.applied_seq
    if leader is None or leader == node.node_id or request.headers.get("X-Tsched-Forwarded"):
        raise ApiError("no_leader", "this node is not the leader", {"leader": leader})
    try:
        status, raw = await node.forwarder.send(
            node.config.node(leader).url, "POST", "/v1/claims", body,
            timeout_s=HEAD_TIMEOUT_S, headers=_forwarded_headers(request))
        data = orjson.loads(raw) if raw else {}
    except (ApiError, orjson.JSONDecodeError):
        raise ApiError("unavailable", "the leader did not answer the head read",
                       {"leader": leader}) from None
    found = data.get("head") if isinstance(data, dict) else None
    if status != 200 or not (found is None or isinstance(found, int)):
        raise ApiError("unavailable", "the leader did not answer the head read",
                       {"leader": leader})
    return found, max(int(data.get("applied_seq") or 0), replica.applied_seq)
