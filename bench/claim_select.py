"""Claim selection cost and memory per pending task of the state machine.

Prints (asserts nothing): microseconds per claimed task and bytes per pending task at
10,000 / 100,000 / 1,000,000 pending tasks spread over 100 tenants and 10 task types.

    .venv/bin/python bench/claim_select.py [--sizes 10000,100000,1000000] [--claims 300]

Times are CPU time of this process (time.process_time). Tasks go in through `StateMachine.apply` (the real path, with validation). Memory is the
growth of the process's resident set while the tasks are submitted, divided by their
number (it includes the claim queue, listing indexes and the bounded request table).
"""
from __future__ import annotations

import argparse
import gc
import platform
import time

from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c

TENANTS = [f"tenant-{i:03d}" for i in range(100)]
TYPES = [f"type-{i}" for i in range(10)]
T0 = 1_700_000_000_000


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def fill(sm: StateMachine, n: int) -> None:
    apply = sm.apply
    for i in range(n):
        apply(c.SubmitTask(request_id=f"s{i}", now_ms=T0 + i // 1000, task_id=f"task-{i:08d}",
                           tenant=TENANTS[i % 100], task_type=TYPES[(i // 100) % 10],
                           payload_json='{"n":%d}' % i, priority=i % 11))


_requests = iter(range(10 ** 9))


def claim_cost_us(sm: StateMachine, claims: int, types: tuple[str, ...], max_tasks: int) -> float:
    now = T0 + 10_000_000
    granted = 0
    start = time.process_time()   # CPU time: other processes on the machine do not count
    for _ in range(claims):
        result = sm.apply(c.Claim(request_id=f"claim-{next(_requests)}", now_ms=now,
                                  worker_id="w", task_types=types, max_tasks=max_tasks,
                                  lease_ms=3_600_000))
        granted += len(result.value["tasks"])
    assert granted == claims * max_tasks, "the backlog ran dry: fewer claims"
    elapsed = time.process_time() - start
    return elapsed / max(1, granted) * 1e6


def run(n: int, claims: int) -> None:
    gc.collect()
    before = rss_bytes()
    sm = StateMachine()
    t = time.process_time()
    fill(sm, n)
    fill_s = time.process_time() - t
    gc.collect()
    per_task = (rss_bytes() - before) / n
    all_types = claim_cost_us(sm, claims // 4, tuple(TYPES), 10)
    one_type = claim_cost_us(sm, claims // 4, (TYPES[3],), 10)
    single = claim_cost_us(sm, claims, (TYPES[5],), 1)
    print(f"{n:>9,} pending | {per_task:7.0f} B/task | submit {fill_s / n * 1e6:6.1f} us/task | "
          f"claim us/task: 10 types x10 {all_types:7.1f}, 1 type x10 {one_type:6.1f}, "
          f"1 type x1 {single:6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--claims", type=int, default=300)
    args = parser.parse_args()
    print(f"# bench/claim_select.py --sizes {args.sizes} --claims {args.claims}")
    print(f"# {platform.python_implementation()} {platform.python_version()} on "
          f"{platform.machine()}, {platform.system()} {platform.release()}")
    print("# 100 tenants x 10 task types, priorities 0..10, every task due")
    for n in (int(s) for s in args.sizes.split(",")):
        run(n, args.claims)


if __name__ == "__main__":
    main()
