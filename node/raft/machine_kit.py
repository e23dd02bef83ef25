"""`MachineKit`: how the replica makes, restores and feeds its state machine."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from tsched.statemachine import Limits, StateMachine, codec, commands
from tsched.statemachine.errors import STALE_TOKEN, Result


@dataclass(frozen=True)
class MachineKit:
    """How the replica makes, restores and feeds the state machine (a seam for tests,
    whose machines stand in for a `StateMachine`)."""

    new: Callable[[], StateMachine]
    restore: Callable[[bytes], StateMachine]
    encode_batch: Callable[[list], bytes]
    decode_batch: Callable[[bytes], list]
    barrier: Callable[[str, int], object]      # (request_id, now_ms) -> command
    # (cmds, blob) -> what decode_batch(blob) returns, for blob = encode_batch(cmds): a
    # replica applies the batches it proposed without decoding them (pending_proposals.py).
    # None: it decodes every entry.
    as_batch: Callable[[list, bytes], list] | None = None


def default_kit(limits: Limits | None = None) -> MachineKit:
    lim = limits if limits is not None else Limits()
    return MachineKit(
        new=lambda: StateMachine(limits=lim),
        restore=lambda blob: StateMachine.restore(blob, limits=lim),
        encode_batch=codec.encode_batch,
        decode_batch=codec.decode_batch,
        barrier=lambda rid, now_ms: commands.Barrier(request_id=rid, now_ms=now_ms),
        as_batch=commands.Batch.of,
    )


class DivergingMachine(StateMachine):
    """A state machine that refuses every completion: the `diverge_apply` failpoint."""

    def _apply_untidy(self, cmd: object) -> Result:
        if type(cmd) is commands.Complete:
            return Result(STALE_TOKEN, "diverge_apply failpoint", None, {})
        return super()._apply_untidy(cmd)


def diverging_kit(limits: Limits | None = None) -> MachineKit:
    """The replica's machine kit with a `DivergingMachine` (node/failpoints.py)."""
    return replace(default_kit(limits), new=lambda: DivergingMachine(limits=limits),
                   restore=lambda blob: DivergingMachine.restore(blob, limits=limits))
