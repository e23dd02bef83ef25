"""Garbage-collection pauses while a state machine grows to N tasks, with and without the
node's policy (node/gcpolicy.py: freeze the survivors of full collections).

Prints (asserts nothing): how many collections of the middle and old generations ran, the
longest pause among them, the pause of one more full collection at the end (what the next
one would cost at that size) and the fill time. Pauses are CPU time of the collecting
thread (other processes on the machine do not lengthen them), with wall time beside. Where tsnode's event loop would run the full collection the policy asks for, this
script calls `collect_if_due` after each batch.

    .venv/bin/python -m bench.gc_pause                      # 1,000,000 tasks, both modes
    .venv/bin/python -m bench.gc_pause --tasks 300000 --modes policy
"""
from __future__ import annotations

import argparse
import gc
import os
import time

from bench.lib.machine import describe
from tsched.node.gcpolicy import GcPolicy
from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c

# tsnode before the policy (kept here so the comparison stays reproducible).
OLD_THRESHOLDS = (50_000, 20, 10)
T0 = 1_800_000_000_000
BATCH = 500


def fill(n: int, policy: GcPolicy | None) -> float:
    sm = StateMachine()
    start = time.perf_counter()
    for _ in range(n // BATCH):
        sm.apply_batch([c.SubmitTask(request_id=os.urandom(8).hex(), now_ms=T0,
                                     task_id=os.urandom(12).hex(), tenant="default",
                                     task_type="x", payload_json='{"n": 1}')
                        for _ in range(BATCH)])
        if policy is not None:
            policy.collect_if_due()
    elapsed = time.perf_counter() - start
    fill.keep = sm     # the state stays alive for the final collection
    return elapsed


def run(mode: str, n: int) -> None:
    pauses: list[float] = []      # CPU ms
    walls: list[float] = []       # wall ms
    started: list[tuple[float, float]] = []

    def timer(phase: str, info: dict) -> None:
        if info["generation"] < 1:
            return
        if phase == "start":
            started.append((time.thread_time(), time.perf_counter()))
        else:
            cpu, wall = started.pop()
            pauses.append((time.thread_time() - cpu) * 1000)
            walls.append((time.perf_counter() - wall) * 1000)

    policy = GcPolicy() if mode == "policy" else None
    if policy is not None:
        policy.install()
    else:
        gc.set_threshold(*OLD_THRESHOLDS)
    gc.callbacks.insert(0, timer)
    try:
        fill_s = fill(n, policy)
        during, during_wall = list(pauses), list(walls)
        gc.collect()
        final = pauses[-1]
    finally:
        gc.callbacks.remove(timer)
        if policy is not None:
            policy.uninstall()
        fill.keep = None
        gc.unfreeze()
        gc.collect()
    print(f"FIGURE gc_{mode}_longest_pause_ms ({n} tasks): {max(during or [0.0]):.0f} ms CPU "
          f"(wall {max(during_wall or [0.0]):.0f} ms) over {len(during)} collections of "
          f"generations 1-2; next full collection {final:.0f} ms CPU; fill {fill_s:.1f} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=1_000_000)
    p.add_argument("--modes", default="old,policy", help="old (thresholds only), policy")
    args = p.parse_args()
    print("== garbage-collection pauses while the state grows")
    print(f"command : python -m bench.gc_pause --tasks {args.tasks} --modes {args.modes}")
    print("machine : " + ", ".join(f"{k}={v}" for k, v in describe().items()))
    for mode in args.modes.split(","):
        run(mode, args.tasks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
