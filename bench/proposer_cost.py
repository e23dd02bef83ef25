"""The node's CPU per command between an HTTP handler and the state machine, in one
process: the `Proposer` (waiters, packing, answers back to the loop) and the rendering of
each answer, over a replica that commits at once (no Raft, no network). Submits in batches
of 500, then claims of 100 and completions of 100, as `bench.apply_cost` does. With
`--minimal` submits and completions are answered as `Prefer: return=minimal` asks.

Prints (asserts nothing) CPU microseconds per lifecycle. For an A/B on a shared machine,
count instructions, run twice to subtract start-up (PYTHONPATH picks the code measured):

    .venv/bin/python -m bench.proposer_cost --tasks 20000
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python -m bench.proposer_cost --tasks 6000      # and --tasks 0
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from types import SimpleNamespace

from bench.apply_cost import print_cpu_figure
from tsched.node.present import minimal_result as render_minimal
from tsched.node.present import result as render
from tsched.node.raft.proposer import Proposer
from tsched.statemachine import StateMachine, codec
from tsched.statemachine import commands as c

T0 = 1_800_000_000_000
BATCH = 500
CLAIM_MAX = 100


class InstantReplica:
    """What the Proposer uses of a Replica; a proposal is applied on the next loop turn."""

    options = SimpleNamespace(entry_bytes_max=64 << 20)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.sm = StateMachine()
        self.applied_seq = 0
        self._loop = loop
        self._listeners: list = []

    def add_apply_listener(self, fn) -> None:
        self._listeners.append(fn)

    def leader_id(self) -> str:
        return "n1"

    def encode_batch(self, cmds: list) -> bytes:
        return codec.encode_batch(cmds)

    def propose_blob(self, blob: bytes, on_error=None, cmds=None) -> None:
        self._loop.call_soon(self._apply, blob)

    def _apply(self, blob: bytes) -> None:
        cmds = codec.decode_batch(blob)
        results = self.sm.apply_batch(cmds)
        self.applied_seq += 1
        for fn in self._listeners:
            fn(self.applied_seq, cmds, results)


# The replica commits at once, but under valgrind one commit can take seconds: no deadline,
# re-proposal or leader poll may fire, or the count would depend on the clock.
PATIENCE_S = 3600.0


async def run(n: int, minimal: bool = False) -> int:
    proposer = Proposer(InstantReplica(asyncio.get_running_loop()), asyncio.get_running_loop(),
                        render=render, render_minimal=render_minimal,
                        repropose_after_s=PATIENCE_S, leader_poll_s=PATIENCE_S)
    ids = (f"{i:032x}" for i in itertools.count())
    done = 0
    for start in range(0, n, BATCH):
        await proposer.propose([c.SubmitTask(request_id=next(ids), now_ms=T0, task_id=next(ids),
                                             tenant="default", task_type="x",
                                             payload_json='{"n":1}')
                                for _ in range(min(BATCH, n - start))], PATIENCE_S,
                               minimal=minimal)
        while True:
            (tasks,), _ = await proposer.propose([c.Claim(
                request_id=next(ids), now_ms=T0 + 1, worker_id="w", task_types=("x",),
                max_tasks=CLAIM_MAX, lease_ms=600_000)], PATIENCE_S)
            if not tasks:
                break
            answers, _ = await proposer.propose([c.Complete(
                request_id=next(ids), now_ms=T0 + 2, task_id=t["task_id"],
                fencing_token=t["fencing_token"]) for t in tasks], PATIENCE_S,
                minimal=minimal)
            done += sum(1 for a in answers if a["state"] == "completed")
    return done


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=20_000)
    p.add_argument("--minimal", action="store_true",
                   help="submits and completions answered minimally (Prefer: return=minimal)")
    args = p.parse_args()
    start = time.process_time()
    done = asyncio.run(run(args.tasks, args.minimal))
    print_cpu_figure("proposer", f"--tasks {args.tasks}" + (" --minimal" * args.minimal),
                     time.process_time() - start,
                     args.tasks, done)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
