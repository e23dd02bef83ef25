"""Writes: commands proposed through Raft and their answers awaited, and the request ids
that make a retried request (same Idempotency-Key) apply once."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from tsched.statemachine.limits import API_LIMITS
from tsched.statemachine.request_ids import request_ids_for

from tsched.node.api import validate
from tsched.node.api.scope import SCOPE_KEY
from tsched.node.api.services import Node
from tsched.node.errors import ApiError
from tsched.node.ids import new_id


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
    return request_ids_for(request.get(SCOPE_KEY) or "", request.method, request.path, key)


async def propose(node: Node, cmds: list, *, sheddable: bool = False, urgent: bool = False,
                  minimal: bool | Sequence[bool] = False) -> tuple[list, int]:
    """Commit `cmds`: (one rendered result per command, or an ApiError; applied seq).
    `sheddable`: a full proposal queue answers 429 `overloaded` (DESIGN 14.2); `urgent`
    ones (every task urgent, DESIGN 5.1) only past twice its bound. `minimal`:
    render the minimal answers (`prefers_minimal`), for every command or per command."""
    from tsched.node.raft.proposer import ProposalError
    assert node.proposer is not None, "the app's startup context makes the proposer"
    try:
        return await node.proposer.propose(cmds, node.propose_timeout_s, sheddable=sheddable,
                                           urgent=urgent, minimal=minimal)
    except ProposalError as e:
        if e.code == "overloaded":
            raise ApiError("overloaded", f"this node is overloaded: {e}",
                           {"reason": "queue_full",
                            "retry_after_s": API_LIMITS.queue_full_retry_after_s}) from None
        code = "no_leader" if e.code == "no_leader" else "timeout"
        raise ApiError(code, f"the write was not committed in time: {e}",
                       {"outcome": "not_committed" if code == "no_leader" else "unknown"}
                       ) from None


async def propose_one(node: Node, cmd, *, sheddable: bool = False, urgent: bool = False,
                      minimal: bool = False) -> tuple[Any, int]:
    (value,), seq = await propose(node, [cmd], sheddable=sheddable, urgent=urgent,
                                  minimal=minimal)
    if isinstance(value, ApiError):
        # Raised from a local, the error's traceback holds this frame and the frame holds
        # the error: a reference cycle that only the cyclic collector frees, with the whole
        # request hanging from it. One alive when a full collection froze the survivors
        # (gcpolicy) was never freed (bench/notes/2026-12-01-overload.md). Dropping the local
        # breaks the cycle.
        try:
            raise value
        finally:
            del value
    return value, seq
