"""State machine snapshot and digest costs at 100K and 1M pending tasks (in process).

For each level, fills a StateMachine with pending tasks through `apply_batch` (submits in
batches, 8 tenants x 4 task types, so the request table is full too), then measures:
  - digest(): the first call on the built state, then after one more command (the cost a
    `GET /v1/cluster` pays under the replica lock), and the from-scratch reference;
  - snapshot(): encode time and size (a forked child pays this at compaction);
  - StateMachine.restore(): decode and index rebuild (a restarting node pays this), and the
    first digest() of the restored machine.
Prints figures only; asserts nothing.

    python -m bench.snapshot                     # 100K and 1M (a few minutes)
    python -m bench.snapshot --levels 100000     # one level
"""
from __future__ import annotations

import argparse
import gc
import resource
import shlex
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.machine import describe  # noqa: E402
from tsched.statemachine import StateMachine  # noqa: E402
from tsched.statemachine import commands as c  # noqa: E402

T0 = 1_700_000_000_000
BATCH = 5_000
TENANTS = 8
TYPES = 4


def _submit(i: int) -> c.SubmitTask:
    return c.SubmitTask(request_id=f"r{i}", now_ms=T0 + i // BATCH, task_id=f"task-{i:08d}",
                        tenant=f"tenant-{i % TENANTS}", task_type=f"type-{i % TYPES}",
                        payload_json='{"user":%d,"kind":"welcome"}' % i,
                        priority=i % 11, run_at_ms=T0 + (i % 1_000) * 1_000)


def build(tasks: int) -> StateMachine:
    sm = StateMachine()
    for start in range(0, tasks, BATCH):
        sm.apply_batch([_submit(i) for i in range(start, min(tasks, start + BATCH))])
    return sm


def timed(fn):
    gc.collect()
    t0 = time.perf_counter()
    value = fn()
    return value, (time.perf_counter() - t0) * 1000


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def level(tasks: int) -> None:
    sm, build_ms = timed(lambda: build(tasks))
    print(f"\n== {tasks:,} pending tasks (built in {build_ms / 1000:.1f} s; "
          f"peak RSS {rss_mib():.0f} MiB)")
    _, first_ms = timed(sm.digest)
    sm.apply_batch([_submit(tasks)])
    _, again_ms = timed(sm.digest)
    sm.apply_batch([c.Claim(request_id="claim", now_ms=T0 + 10 ** 9, worker_id="w",
                            task_types=("type-0",), max_tasks=10)])
    _, claim_ms = timed(sm.digest)
    print(f"digest: first {first_ms:.1f} ms; after one submit {again_ms:.2f} ms; "
          f"after a 10-task claim {claim_ms:.2f} ms")
    full = getattr(sm, "state_digest", None)   # the from-scratch state digest, where it exists
    if full is not None:
        _, full_ms = timed(full)
        print(f"digest from scratch (reference, not on any request path): {full_ms:.0f} ms")
    blob, encode_ms = timed(sm.snapshot)
    print(f"snapshot encode: {encode_ms / 1000:.2f} s, {len(blob) / 2 ** 20:.1f} MiB "
          f"({len(blob) / len(sm.tasks):.0f} B/task)")
    expected = sm.digest()
    del sm
    restored, restore_ms = timed(lambda: _restore_as_the_node_does(blob))
    digest, rdigest_ms = timed(restored.digest)
    print(f"restore: {restore_ms / 1000:.2f} s; its first digest {rdigest_ms:.1f} ms "
          f"({'equal' if digest == expected else 'DIFFERENT'}); peak RSS {rss_mib():.0f} MiB")


def _restore_as_the_node_does(blob: bytes):
    """With collections paused, as node/raft/replica.py restores (the state machine leaves the
    garbage collector to the node)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return StateMachine.restore(blob)
    finally:
        if enabled:
            gc.enable()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", type=int, nargs="+", default=[100_000, 1_000_000])
    args = ap.parse_args()
    print("command: python -m bench.snapshot " + shlex.join(sys.argv[1:]))
    print("machine: " + "; ".join(f"{k} {v}" for k, v in describe().items()))
    for n in args.levels:
        level(n)


if __name__ == "__main__":
    main()
