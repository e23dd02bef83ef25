"""A claim sent on from a follower to the leader (DESIGN.md sections 4 and 7): the claim's
decision (scheduling/claims.py) follows leader changes and asks these to forward; the body
this node parsed is re-encoded (never parsed again), with the wait that is left, and the
leader's answer read back into a `ClaimOutcome`. Over `node/forwarding.py`'s Forwarder."""
from __future__ import annotations

import orjson
from aiohttp import web

from tsched.node.api.claim_parsing import HEAD_HEADER, KEY_HEADER, WATCH_HEADER
from tsched.node.errors import ERROR_CODES, ApiError
from tsched.node.scheduling.claim_hub import release
from tsched.node.scheduling.claim_request import ClaimOutcome, ClaimRequest, JsonObject
from tsched.node.scheduling.claims import Forward, HeadForward
from tsched.node.services import Node

FORWARD_MARGIN_S = 5.0     # a forwarded wait's HTTP timeout beyond its wait_s
HEAD_TIMEOUT_S = 5.0       # a head read forwarded to the leader: it never waits there
FORWARDED_HEADERS = ("Authorization", KEY_HEADER, WATCH_HEADER, HEAD_HEADER, "Prefer")


def forwarded_headers(request: web.Request) -> dict[str, str]:
    """What the leader needs of the caller's headers: its token, its Idempotency-Key (the
    leader derives the Claims' request ids from it), whether it only watches, and how it
    wants its tasks and carried completions answered."""
    return {h: request.headers[h] for h in FORWARDED_HEADERS if h in request.headers}


def is_gone(request: web.Request) -> bool:
    """The caller's connection is gone (tasks claimed for it are released)."""
    return request.transport is None or request.transport.is_closing()


def claim_forward(node: Node, request: web.Request, req: ClaimRequest,
                  body: JsonObject) -> Forward:
    """How this claim (`body`, as parsed here) is sent to a leader."""

    async def forward(leader: str, remaining: float, answered: bool) -> ClaimOutcome | None:
        """The leader's answer; None if the leader could not serve it. `answered`: the
        carried completions were answered already (by this node, as leader): not sent."""
        payload = {**body, "wait_s": round(remaining, 3)}
        if answered:
            payload.pop("completions", None)
        assert node.forwarder is not None, "the app's startup context makes the forwarder"
        try:
            status, raw = await node.forwarder.send(
                node.config.node(leader).url, "POST", "/v1/claims", orjson.dumps(payload),
                timeout_s=remaining + FORWARD_MARGIN_S, headers=forwarded_headers(request))
        except ApiError:
            return None
        try:
            data = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            return None   # not an answer of ours: treat the leader as unreachable
        if status == 200:
            return await _answered(node, request, req, data)
        _raise_refusal(status, data)
        return None
    return forward


async def _answered(node: Node, request: web.Request, req: ClaimRequest,
                    data: JsonObject) -> ClaimOutcome:
    seq = max(int(data.get("applied_seq") or 0), node.replica.applied_seq)
    completions = data.get("completions")
    if data.get("ready") is True and req.watch:
        return ClaimOutcome([], seq, ready=True, completions=completions)
    tasks = data.get("tasks", [])
    if tasks and is_gone(request):
        await release(node, [(t["task_id"], t["fencing_token"]) for t in tasks])
        return ClaimOutcome([], node.replica.applied_seq, completions=completions)
    return ClaimOutcome(tasks, seq, completions=completions)


def _raise_refusal(status: int, data: object) -> None:
    """The leader refused the claim for a reason of the claim's own (a 4xx of ours): that
    is the answer. Anything else: this leader could not serve it (return)."""
    err = data.get("error") if isinstance(data, dict) else None
    if status >= 500 or not isinstance(err, dict) or err.get("code") not in ERROR_CODES:
        return
    details = err.get("details")
    raise ApiError(err["code"], str(err.get("message") or "the leader refused"),
                   details if isinstance(details, dict) else {})


def head_forward(node: Node, request: web.Request, raw: bytes) -> HeadForward:
    """How this head read (`raw`, the body as it came) is sent to the leader."""

    async def forward(leader: str) -> ClaimOutcome:
        assert node.forwarder is not None, "the app's startup context makes the forwarder"
        try:
            status, answer = await node.forwarder.send(
                node.config.node(leader).url, "POST", "/v1/claims", raw,
                timeout_s=HEAD_TIMEOUT_S, headers=forwarded_headers(request))
            data = orjson.loads(answer) if answer else {}
        except (ApiError, orjson.JSONDecodeError):
            raise ApiError("unavailable", "the leader did not answer the head read",
                           {"leader": leader}) from None
        found = data.get("head") if isinstance(data, dict) else None
        if status != 200 or not (found is None or isinstance(found, int)):
            raise ApiError("unavailable", "the leader did not answer the head read",
                           {"leader": leader})
        return ClaimOutcome([], max(int(data.get("applied_seq") or 0), node.replica.applied_seq),
                            head=found)
    return forward
