"""What every handler shares: the node's services, JSON in/out, proposing and consistent reads."""
from __future__ import annotations

import asyncio
import hashlib
import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tsched.statemachine.limits import API_LIMITS

from tsched.node.api import validate
from tsched.node.api.auth import SCOPE_KEY
from tsched.node.errors import ApiError
from tsched.node.ids import new_id

FORWARDED_HEADER = "X-Tsched-Forwarded"
MIN_SEQ_WAIT_S = 5.0          # a read waiting for its min_seq gives up after this (504)
PROPOSE_TIMEOUT_S = 10.0      # a write waiting for its commit gives up after this (504)
SEQ_MAX = 2**63 - 1


@dataclass
class Node:
    """The services handlers use; one per app, held under NODE."""

    node_id: str
    config: Any                 # config.ClusterConfig
    replica: Any                # raft.Replica
    clock: Any                  # clock.Clock
    proposer: Any = None        # proposer.Proposer, made at app startup
    forwarder: Any = None       # forward.Forwarder
    claims: Any = None          # claims.ClaimHub
    timer: Any = None           # timer.LeaderTimer
    gc_policy: Any = None       # gcpolicy.GcPolicy (tsnode installs one; tests may not)
    seqs: "SeqWatcher" = field(default_factory=lambda: SeqWatcher())
    propose_timeout_s: float = PROPOSE_TIMEOUT_S
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)   # set on SIGTERM
    shard: int | None = None    # this process's shard when the cluster has several

    def new_task_id(self) -> str:
        """A fresh task id; with shards its first two hex digits name this shard, so any
        node routes the id (DESIGN.md section 13)."""
        if self.shard is None:
            return new_id()
        from tsched.node.shards.layout import task_id_in
        return task_id_in(self.shard, new_id())

    @property
    def stopping(self) -> bool:
        """SIGTERM arrived: long polls end at once, so workers go to other nodes."""
        return self.stop_event.is_set()

    def leader_url(self) -> str | None:
        leader = self.replica.leader_id()
        if leader is None:
            return None
        try:
            return self.config.node(leader).url
        except ValueError:
            return None


NODE = web.AppKey("node", Node)


def node_of(request: web.Request) -> Node:
    return request.app[NODE]


def request_id(request: web.Request, suffix: str = "") -> str:
    """The client's Idempotency-Key makes a retried request apply once; else a fresh id.

    The id is a digest over the caller's tenant scope too: one tenant's key never answers
    with another tenant's recorded result, and a long key or path stays within the state
    machine's id length."""
    return request_ids(request)(suffix)


def request_ids(request: web.Request) -> Callable[[str], str]:
    """`request_id(request, suffix)` for the items of one batch (`#i`): the key is checked
    and the request's part of the digest joined once, not once per item."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return lambda suffix: new_id()
    validate.text(key, "Idempotency-Key", validate.IDEMPOTENCY_KEY_CHARS_MAX)
    head = "\n".join((request.get(SCOPE_KEY) or "", request.method, request.path, key))
    sha256 = hashlib.sha256
    return lambda suffix: "idem-" + sha256((head + suffix).encode("utf-8", "surrogatepass")
                                           ).hexdigest()


# --- JSON in/out ---------------------------------------------------------------------------

async def json_body(request: web.Request) -> Any:
    """The parsed body, or None when there is none. Size is bounded by client_max_size."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise validate.invalid(f"body is not valid JSON: {e}") from None
    validate.json_depth(value, raw)
    return value


def respond(body: dict, seq: int, status: int = 200, minimal: bool = False,
            leader_url: str | None = None) -> web.Response:
    """`minimal`: the answer honoured `Prefer: return=minimal` (RFC 7240 says to tell).
    `leader_url`: named in LEADER_HEADER (claims: a client may send its next one there)."""
    body["applied_seq"] = seq
    headers = {"X-Applied-Seq": str(seq)}
    if minimal:
        headers[PREFERENCE_APPLIED_HEADER] = RETURN_MINIMAL
    if leader_url is not None:
        headers[LEADER_HEADER] = leader_url
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json",
                        headers=headers)


LEADER_HEADER = "X-Tsched-Leader"   # the leader's URL, on claim answers
PREFER_HEADER = "Prefer"
PREFERENCE_APPLIED_HEADER = "Preference-Applied"
RETURN_MINIMAL = "return=minimal"
PREFER_BYTES_MAX = 1024


def prefers_minimal(request: web.Request) -> bool:
    """The request says `Prefer: return=minimal` (RFC 7240): the tasks a submit creates and
    the completions and failures it reports are then answered by each task's id and state
    (present.minimal_result). A preference the node does not know, or a header past
    PREFER_BYTES_MAX, is ignored, as the RFC asks."""
    raw = request.headers.get(PREFER_HEADER)
    if not raw or len(raw) > PREFER_BYTES_MAX:
        return False
    for pref in raw.split(","):
        name, _, value = pref.split(";", 1)[0].strip().partition("=")
        if name.strip().lower() == "return" and value.strip().strip('"').lower() == "minimal":
            return True
    return False


def error_response(err: ApiError, seq: int | None) -> web.Response:
    body = err.body()
    headers = {}
    if err.code == "overloaded":   # DESIGN 14.2: every overloaded answer says when to retry
        headers["Retry-After"] = str(err.details.get("retry_after_s")
                                     or API_LIMITS.shed_retry_after_s)
    if seq is not None:
        body["applied_seq"] = seq
        headers["X-Applied-Seq"] = str(seq)
    return web.Response(body=orjson.dumps(body), status=err.status,
                        content_type="application/json", headers=headers)


# --- writes --------------------------------------------------------------------------------

async def propose(node: Node, cmds: list, *, sheddable: bool = False,
                  minimal: bool | Sequence[bool] = False) -> tuple[list, int]:
    """Commit `cmds`: (one rendered result per command, or an ApiError; applied seq).
    `sheddable`: a full proposal queue answers 429 `overloaded` (DESIGN 14.2). `minimal`:
    render the minimal answers (`prefers_minimal`), for every command or per command."""
    from tsched.node.raft.proposer import ProposalError
    try:
        return await node.proposer.propose(cmds, node.propose_timeout_s, sheddable=sheddable,
                                           minimal=minimal)
    except ProposalError as e:
        if e.code == "overloaded":
            raise ApiError("overloaded", f"this node is overloaded: {e}",
                           {"reason": "queue_full",
                            "retry_after_s": API_LIMITS.queue_full_retry_after_s}) from None
        code = "no_leader" if e.code == "no_leader" else "timeout"
        raise ApiError(code, f"the write was not committed in time: {e}",
                       {"outcome": "not_committed" if code == "no_leader" else "unknown"}
                       ) from None


async def propose_one(node: Node, cmd, *, sheddable: bool = False,
                      minimal: bool = False) -> tuple[Any, int]:
    (value,), seq = await propose(node, [cmd], sheddable=sheddable, minimal=minimal)
    if isinstance(value, ApiError):
        # Raised from a local, the error's traceback holds this frame and the frame holds
        # the error: a reference cycle that only the cyclic collector frees, with the whole
        # request hanging from it. One alive when a full collection froze the survivors
        # (gcpolicy) was never freed: at 3x overload (a refusal through Raft each) nodes grew
        # by 4-6 MB a minute. Dropping the local breaks the cycle.
        try:
            raise value
        finally:
            del value
    return value, seq


# --- reads ---------------------------------------------------------------------------------

async def before_read(request: web.Request, node: Node, extra: tuple[str, ...] = ()
                      ) -> web.Response | None:
    """Apply `min_seq` and `consistency`; a response when the read was sent to the leader."""
    q = request.query
    validate.query(q, ("min_seq", "consistency") + extra)
    mode = validate.consistency(q)
    min_seq = validate.query_int(q, "min_seq", 0, SEQ_MAX, 0)
    unhealthy = getattr(node.replica, "unhealthy_reason", lambda: None)()
    if unhealthy is not None:     # a stuck Raft thread: the state may be far behind
        raise ApiError("unavailable", unhealthy, {"node": node.node_id})
    if mode == "linearizable":
        if not node.replica.is_ready_leader():
            return await relay_to_leader(request, node)
        from tsched.statemachine import commands as c
        _, seq = await propose_one(node, c.Barrier(request_id=new_id(),
                                                   now_ms=node.clock.now_ms()))
        min_seq = max(min_seq, seq)
    if min_seq:
        await node.seqs.wait(min_seq, node.replica, MIN_SEQ_WAIT_S)
    return None


async def relay_to_leader(request: web.Request, node: Node) -> web.Response:
    if request.headers.get(FORWARDED_HEADER):
        raise ApiError("no_leader", "this node is no longer the leader", {"node": node.node_id})
    url = node.leader_url()
    if url is None or node.replica.leader_id() == node.node_id:
        raise ApiError("no_leader", "no leader is known at the moment")
    body = await request.read()
    auth = request.headers.get("Authorization")
    status, data = await node.forwarder.send(url, request.method, request.path_qs,
                                             body or None, timeout_s=MIN_SEQ_WAIT_S + 5,
                                             headers={"Authorization": auth} if auth else None)
    return web.Response(body=data, status=status, content_type="application/json")


class SeqWatcher:
    """Futures resolved when the local replica has applied a given sequence number."""

    PRUNE_AT = 10_000   # entries; timed-out waits for far-off seqs are dropped past this

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future]] = []
        self._ids = itertools.count()

    def on_applied(self, seq: int) -> None:
        while self._heap and self._heap[0][0] <= seq:
            _, _, fut = heapq.heappop(self._heap)
            if not fut.done():
                fut.set_result(None)

    async def wait(self, seq: int, replica, timeout_s: float) -> None:
        if replica.applied_seq >= seq:
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (seq, next(self._ids), fut))
        if replica.applied_seq >= seq:      # applied between the check and the push
            return
        await asyncio.wait({fut}, timeout=timeout_s)   # never cancels fut (unlike wait_for)
        if not fut.done():
            fut.cancel()   # marks the heap entry dead
            if len(self._heap) > self.PRUNE_AT:
                self._heap = [e for e in self._heap if not e[2].done()]
                heapq.heapify(self._heap)
            raise ApiError("timeout", f"this node has not applied seq {seq} yet",
                           {"min_seq": seq, "applied_seq": replica.applied_seq}) from None
