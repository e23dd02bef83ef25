"""Writes: commands proposed through Raft and their answers awaited, a failure to commit
turned into an error code (`no_leader`, `timeout`, `overloaded`)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tsched.statemachine.commands import Command
from tsched.statemachine.limits import API_LIMITS

from tsched.node.errors import ApiError
from tsched.node.raft.proposer import ProposalError, Proposer, Rendered


class Proposing(Protocol):
    """What a write needs of the node's services (`services.Node` is one)."""

    proposer: Proposer | None
    propose_timeout_s: float


async def propose(node: Proposing, cmds: list, *, sheddable: bool = False, urgent: bool = False,
                  minimal: bool | Sequence[bool] = False) -> tuple[list[Rendered], int]:
    """Commit `cmds`: (one rendered result per command, or an ApiError; applied seq).
    `sheddable`: a full proposal queue answers 429 `overloaded` (DESIGN 14.2); `urgent`
    ones (every task urgent, DESIGN 5.1) only past twice its bound. `minimal`:
    render the minimal answers (`prefers_minimal`), for every command or per command."""
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


async def propose_one(node: Proposing, cmd: Command, *, sheddable: bool = False, urgent: bool = False,
                      minimal: bool = False) -> tuple[Rendered, int]:
    """Commit one command: (its rendered result, applied seq)."""
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
