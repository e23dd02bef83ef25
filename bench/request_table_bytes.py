"""Bytes per request-table entry (statemachine/request_table.py), measured with tracemalloc.

Fills a state machine's request table with N recorded answers of the commonest kind (a
submit's `task` row) under timed request ids as the node derives them, at 10 per
millisecond of state clock (the design's peak), and reports the memory the table took per
entry: the ids, the OrderedDict, the rows and the run-length times. The tasks themselves
are left out (they are counted against `live_tasks_max`): each row names an id that
exists. `python -m bench.request_table_bytes [--entries N]`.
"""
from __future__ import annotations

import argparse
import gc
import tracemalloc

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine.request_ids import request_ids_for
from tsched.statemachine.request_table import remember
from tsched.statemachine.results import task_answer

T0 = 1_700_000_000_000


def measure(entries: int) -> float:
    sm = StateMachine(Limits(requests_max=entries + 1))
    task_ids = [f"{i:032x}" for i in range(entries)]   # as the node's ids: 32 hex digits
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(entries):
        ms = T0 + i // 10
        rid = request_ids_for("acme", "POST", "/v1/tasks", f"tsched1-{ms}-{i:032x}")("#0")
        sm.now_ms = ms
        remember(sm, rid, task_answer(task_ids[i], False))
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(sm.requests) == entries
    return used / entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=200_000)
    args = parser.parse_args()
    per = measure(args.entries)
    lim = Limits()
    print(f"entries      : {args.entries}")
    print(f"bytes/entry  : {per:.0f}")
    print(f"requests_max : {lim.requests_max} -> {per * lim.requests_max / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
