"""`MachineKit`: how the replica makes, restores and feeds its state machine."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class MachineKit:
    """How the replica makes, restores and feeds the state machine (a seam for tests)."""

    new: Callable[[], Any]
    restore: Callable[[bytes], Any]
    encode_batch: Callable[[list], bytes]
    decode_batch: Callable[[bytes], list]
    barrier: Callable[[str, int], Any]      # (request_id, now_ms) -> command
    # (cmds, blob) -> what decode_batch(blob) returns, for blob = encode_batch(cmds): a
    # replica applies the batches it proposed without decoding them (proposed.py); None:
    # it decodes every entry.
    as_batch: Callable[[list, bytes], Any] | None = None


def default_kit(limits=None) -> MachineKit:
    from tsched.statemachine import StateMachine, codec, commands
    from tsched.statemachine import Limits

    lim = limits if limits is not None else Limits()
    return MachineKit(
        new=lambda: StateMachine(limits=lim),
        restore=lambda blob: StateMachine.restore(blob, limits=lim),
        encode_batch=codec.encode_batch,
        decode_batch=codec.decode_batch,
        barrier=lambda rid, now_ms: commands.Barrier(request_id=rid, now_ms=now_ms),
        as_batch=commands.Batch.of,
    )


def diverging_kit(limits=None):
    """The replica's machine kit with a state machine that refuses every completion: the
    `diverge_apply` failpoint (node/failpoints.py)."""
    from dataclasses import replace

    from tsched.statemachine import StateMachine, commands
    from tsched.statemachine.errors import STALE_TOKEN, Result

    class DivergingMachine(StateMachine):
        def _apply_untidy(self, cmd):
            if type(cmd) is commands.Complete:
                return Result(STALE_TOKEN, "diverge_apply failpoint", None, {})
            return super()._apply_untidy(cmd)

    return replace(default_kit(limits), new=lambda: DivergingMachine(limits=limits),
                   restore=lambda blob: DivergingMachine.restore(blob, limits=limits))
