"""Paused queues (docs/DESIGN.md section 15.1): what a pause costs the state machine's claims.

Prints (asserts nothing) CPU time of this process (time.process_time), the state machine
driven through `StateMachine.apply` (the real path, with validation): microseconds per
claimed task of an unpaused type, with N pending tasks of a paused type beside it (one
claim asks for both types, as a worker serving both does), N = 0, 10,000 and 100,000,
for a pause by task type and a pause by tenant (the paused tasks spread over 100
tenants). A paused bucket is left out where a claim gathers its buckets, so the figures
should not grow with N (a pause by tenant costs one lookup per bucket of the claim's
types: 100 buckets here); `has_claimable` (what a waiting claim asks after each apply)
likewise.

    .venv/bin/python -m bench.pause_claim_cost [--runs 5]
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

T0 = 1_700_000_000_000
TENANTS = 100
_ids = iter(range(10 ** 9))


def _rid() -> str:
    return f"r{next(_ids)}"


def _setup(paused: int, by: str, claims: int):
    from tsched.statemachine import StateMachine
    from tsched.statemachine import commands as c
    sm = StateMachine()
    for n in range(paused):
        sm.apply(c.SubmitTask(request_id=_rid(), now_ms=T0, task_id=f"p{n}",
                              tenant=f"held-{n % TENANTS}", task_type="held"))
    for n in range(claims):
        sm.apply(c.SubmitTask(request_id=_rid(), now_ms=T0, task_id=f"w{n}",
                              tenant="work", task_type="work"))
    if by == "type":
        sm.apply(c.PauseQueue(request_id=_rid(), now_ms=T0, task_type="held"))
    else:
        for t in range(TENANTS):
            sm.apply(c.PauseQueue(request_id=_rid(), now_ms=T0, tenant=f"held-{t}"))
    return sm


def claim_cost_us(paused: int, by: str, claims: int = 2_000) -> tuple[float, float]:
    """(µs per claimed task, µs per has_claimable) with `paused` paused tasks beside."""
    from tsched.statemachine import commands as c
    sm = _setup(paused, by, claims)
    types = ("held", "work")
    start = time.process_time()
    got = 0
    for _ in range(claims):
        res = sm.apply(c.Claim(request_id=_rid(), now_ms=T0 + 1, worker_id="w",
                               task_types=types, max_tasks=1, lease_ms=3_600_000))
        got += len(res.value["tasks"])
    per_claim = (time.process_time() - start) / got * 1e6
    assert got == claims, "a claim found nothing"
    start = time.process_time()
    for _ in range(claims):
        sm.has_claimable(types, None, 0, T0 + 1)
    per_peek = (time.process_time() - start) / claims * 1e6
    return per_claim, per_peek


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    print(f"command: python -m bench.pause_claim_cost --runs {args.runs}")
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, "
          f"{platform.system()} {platform.release()}")
    for by in ("type", "tenant"):
        for paused in (0, 10_000, 100_000):
            runs = [claim_cost_us(paused, by) for _ in range(args.runs)]
            claim = statistics.median(r[0] for r in runs)
            peek = statistics.median(r[1] for r in runs)
            print(f"FIGURE claim_us paused_by={by} paused={paused}: {claim:.1f} "
                  f"(runs {', '.join(f'{r[0]:.1f}' for r in runs)}); "
                  f"has_claimable_us {peek:.2f}")


if __name__ == "__main__":
    main()
