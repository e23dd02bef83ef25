"""What a claim costs to apply per claimed task: plain, by priority range, and weighted by
tier (DESIGN 5.1), at 10,000 and 100,000 pending tasks.

Prints (asserts nothing): microseconds of `StateMachine.apply` per claimed task, for claims
of 100 tasks (the claim's bound) of one task type, over a backlog whose priorities are
spread evenly over 0..10 (every tier has work) in 10 tenants:

- plain: no range, no weights (claim order of section 5);
- range 0-3 / range 7-9: `priority_min` / `priority_max` (critical+high; low: the walk
  passes the tasks more urgent than the range);
- weighted: `tier_weights` critical 50, high 30, normal 15, low 5.

Each kind runs on a state machine of its own, filled alike, for `--claims` claims (a few
percent of the backlog at 100,000). Times are CPU time of this process.

    .venv/bin/python -m bench.claim_weights [--sizes 10000,100000] [--claims 20]
        [--kinds 'plain,range 0-3,range 7-9,weighted']
"""
from __future__ import annotations

import argparse
import platform
import time

from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c

TENANTS = [f"tenant-{i}" for i in range(10)]
T0 = 1_700_000_000_000
WEIGHTS = ((0, 0, 50), (1, 3, 30), (4, 6, 15), (7, 9, 5))
KINDS: dict[str, dict] = {
    "plain": {},
    "range 0-3": {"priority_min": 0, "priority_max": 3},
    "range 7-9": {"priority_min": 7, "priority_max": 9},
    "weighted": {"tier_weights": WEIGHTS},
}


def filled(n: int) -> StateMachine:
    sm = StateMachine()
    for i in range(n):
        sm.apply(c.SubmitTask(request_id=f"s{i}", now_ms=T0, task_id=f"task-{i:08d}",
                              tenant=TENANTS[i % len(TENANTS)], task_type="work",
                              payload_json="{}", priority=(i // len(TENANTS)) % 11))
    return sm


def cost_us(sm: StateMachine, claims: int, fields: dict) -> float:
    now = T0 + 1_000
    granted = 0
    start = time.process_time()
    for k in range(claims):
        result = sm.apply(c.Claim(request_id=f"claim-{k}", now_ms=now, worker_id="w",
                                  task_types=("work",), max_tasks=100, lease_ms=3_600_000,
                                  **fields))
        granted += len(result.value["tasks"])
    elapsed = time.process_time() - start
    assert granted == claims * 100, "the backlog ran dry"
    return elapsed / granted * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--claims", type=int, default=20)
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="which claims, comma-separated (default: all)")
    args = parser.parse_args()
    kinds = {k: KINDS[k] for k in args.kinds.split(",")}
    print(f"# bench/claim_weights.py --sizes {args.sizes} --claims {args.claims} "
          f"--kinds '{args.kinds}'")
    print(f"# {platform.python_implementation()} {platform.python_version()} on "
          f"{platform.machine()}; apply CPU us per claimed task, claims of 100")
    for n in (int(s) for s in args.sizes.split(",")):
        row = [f"{n:>8,} pending"]
        for name, fields in kinds.items():
            row.append(f"{name} {cost_us(filled(n), args.claims, fields):7.1f}")
        print(" | ".join(row))


if __name__ == "__main__":
    main()
