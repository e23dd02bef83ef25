"""CPU per claimed task of a claim by priority range, against the work more urgent than it.

One state machine in this process (no nodes): N pending due tasks of the normal tier
(priorities 4-6) and 2,000 of the low tier (7-9), one tenant, one task type; then 200
claims of one task each with the whole range (0-10: takes normal work, the top of the
heap) and 200 with the low range 7-9 (what a slot reserved for low claims, DESIGN 5.1),
and the leader's `has_claimable` check for each (run for every idle waiting claim whenever
an applied batch may have made work claimable). Prints microseconds of CPU
(time.process_time) per call; asserts nothing.

    .venv/bin/python -m bench.range_claim_cost [--sizes 1000,10000,40000] [--aged 0]

`--aged N` adds N tasks of static priority 9 that waited past 3 aging intervals (effective
priority 6 or less): out of the low range although of its static priorities, they are the
part of a band the low range's walk still visits (DESIGN 5).

DESIGN 5 states that a range with a lower bound costs, per task claimed, the tasks more
urgent than the range, "drained first by the workers that serve them": under overload they
are not drained, and bench/priority.py's reserved mode is where that shows.
"""
from __future__ import annotations

import argparse
import platform
import time

from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c

T0 = 1_700_000_000_000
LOW = 2_000
AGING = 600_000   # Limits.aging_interval_ms
CALLS = 200
_ids = iter(range(10 ** 9))


def _submit(sm: StateMachine, now_ms: int, priority: int, run_at_ms: int | None = None) -> None:
    n = next(_ids)
    sm.apply(c.SubmitTask(request_id=f"s{n}", now_ms=now_ms, task_id=f"t-{n:09d}",
                          tenant="default", task_type="t", payload_json="{}", priority=priority,
                          run_at_ms=now_ms if run_at_ms is None else run_at_ms))


def costs_us(n: int, aged: int = 0) -> dict[str, float]:
    sm = StateMachine()
    for i in range(n):
        _submit(sm, T0 + i, 4 + i % 3)
    for i in range(LOW):
        _submit(sm, T0 + n + i, 7 + i % 3)
    now = T0 + n + LOW + 1
    for i in range(aged):   # run_at 3 aging intervals and more before now: priority 9 -> <= 6
        _submit(sm, now, 9, run_at_ms=now - 3 * AGING - 1 - i)
    out = {}
    for label, (lo, hi) in (("whole", (0, 10)), ("low", (7, 9))):
        t = time.process_time()
        for _ in range(CALLS):
            assert sm.has_claimable(("t",), None, 0, now, (lo, hi))
        out[f"has_claimable {label}"] = (time.process_time() - t) / CALLS * 1e6
        t = time.process_time()
        for _ in range(CALLS):
            sm.apply(c.Claim(request_id=f"c{next(_ids)}", now_ms=now, worker_id="w",
                             task_types=("t",), max_tasks=1, lease_ms=3_600_000,
                             priority_min=lo, priority_max=hi))
        out[f"claim {label}"] = (time.process_time() - t) / CALLS * 1e6
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1000,10000,40000",
                   help="pending normal-tier tasks (more urgent than the low range)")
    p.add_argument("--aged", type=int, default=0,
                   help="low tasks (static priority 9) aged out of the low range")
    args = p.parse_args()
    print(f"# python -m bench.range_claim_cost --sizes {args.sizes} --aged {args.aged}")
    print(f"# {platform.python_implementation()} {platform.python_version()}; us of CPU per "
          f"call, {LOW:,} low tasks pending besides")
    for n in (int(s) for s in args.sizes.split(",")):
        r = costs_us(n, args.aged)
        print(f"{n:>8,} normal pending | " + " | ".join(f"{k} {v:9.1f}" for k, v in r.items()),
              flush=True)


if __name__ == "__main__":
    main()
