"""Finding an archived task by id: `GET /v1/archive?task_id=` on a real node whose archive
holds the task 1,000,000 lines back (DESIGN 14.3).

Builds the archive directory of a one-node cluster directly with the node's own writer
(`node/ops/archiver.py` `Archive.write`, which writes the day file and its index), in
members of `--per-member` tasks (an evicting Tick evicts at most 10,000), the sought task
last of the first member and `--lines` others after it, all on today's UTC day. Then starts the node and
times, over HTTP:
  - the search by id with the index (the first page answers it);
  - the same search with the index moved away: the line-by-line scan of before, following
    `next_cursor` to the end (200,000 lines a page).
Prints figures only; asserts nothing.

    python -m bench.archive_lookup                         # 1,000,000 lines
    python -m bench.archive_lookup --lines 200000 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.cluster import LocalCluster, http_json  # noqa: E402
from bench.lib.machine import describe  # noqa: E402
from tsched.node.ops.archiver import Archive  # noqa: E402
from tsched.statemachine.archive_format import file_name, index_name  # noqa: E402
from tsched.statemachine.commands import RetryPolicy  # noqa: E402
from tsched.statemachine.model import Task  # noqa: E402


def completed(i: int, now_ms: int) -> Task:
    """A completed task with a payload and a result of a few hundred bytes, as banks send."""
    t = Task(os.urandom(16).hex(), f"tenant-{i % 50}", f"type-{i % 8}",
             '{"account":"DE89370400440532013%03d","amount_cents":%d,"currency":"EUR",'
             '"reference":"settlement batch %d"}' % (i % 1000, i * 7, i // 1000),
             5, now_ms - 60_000, 3, RetryPolicy(), 300_000, f"settle-{i}", None,
             now_ms - 60_000, i)
    t.state, t.attempt, t.worker_id = "completed", 1, f"worker-{i % 16}"
    t.started_at_ms, t.completed_at_ms = now_ms - 50_000, now_ms - 49_000
    t.result_json = '{"ledger_entry":%d,"status":"booked"}' % i
    return t


def build(directory: Path, lines: int, per_member: int, now_ms: int) -> str:
    """The archive: the sought task, then `lines` others; the sought task's id."""
    archive = Archive(directory)
    sought = completed(0, now_ms)
    # the sought task shares its member with others (a lookup decompresses all of it)
    archive.write(now_ms, [completed(i, now_ms) for i in range(1 - per_member, 0)] + [sought])
    for start in range(1, lines + 1, per_member):
        archive.write(now_ms, [completed(i, now_ms)
                               for i in range(start, min(lines + 1, start + per_member))])
    return sought.task_id


def search(url: str, task_id: str) -> tuple[float, int, int]:
    """(seconds, records, pages) of a whole search by id, following next_cursor."""
    t0, records, pages, cursor = time.perf_counter(), 0, 0, None
    while True:
        params = f"task_id={task_id}" + (f"&cursor={cursor}" if cursor else "")
        status, body = http_json("GET", f"{url}/v1/archive?{params}", timeout_s=600)
        assert status == 200, body
        records += len(body["records"])
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return time.perf_counter() - t0, records, pages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--per-member", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print("machine: " + "; ".join(f"{k} {v}" for k, v in describe().items()))
    print("# python -m bench.archive_lookup", shlex.join(sys.argv[1:]))
    now_ms = time.time_ns() // 1_000_000
    cluster = LocalCluster(nodes=1)
    try:
        directory = Path(cluster.root) / cluster.ids[0] / "archive"
        t0 = time.perf_counter()
        task_id = build(directory, args.lines, args.per_member, now_ms)
        data = directory / file_name(now_ms)
        index = directory / index_name(file_name(now_ms))
        print(f"built {args.lines + args.per_member:,} lines in {time.perf_counter() - t0:.1f} s: "
              f"{data.stat().st_size / 2**20:.1f} MiB gzip, index "
              f"{index.stat().st_size / 2**20:.1f} MiB")
        cluster.start()
        cluster.wait_leader()
        url = cluster.url(cluster.ids[0])
        runs = [search(url, task_id) for _ in range(args.repeat)]
        assert all(r[1] == 1 and r[2] == 1 for r in runs), runs
        secs = [r[0] for r in runs]
        print(f"by id with the index: median {statistics.median(secs) * 1000:.1f} ms, "
              f"max {max(secs) * 1000:.1f} ms over {len(secs)} searches (1 page each)")
        index.rename(index.with_name(index.name + ".away"))
        secs, records, pages = search(url, task_id)
        assert records == 1, records
        print(f"by id without the index (the line scan): {secs:.2f} s over {pages} pages")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
