"""One producer's submits/s: a `Client` submitting N tasks in batches, one batch at a time
against several in flight (`Client.submit_batches`), alternating on one cluster.

    python -m bench.producer                          # 3 nodes, 3 rounds x 20,000 tasks
    python -m bench.producer --in-flight 1,4,8 --batch 500
"""
from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from tsched.client import Client  # noqa: E402


def submit_rate(urls: list[str], tasks: int, batch: int, in_flight: int) -> float:
    """Tasks/s of one Client submitting `tasks` no-op tasks of a fresh type."""
    task_type = f"produce-{uuid.uuid4().hex[:6]}"
    items = [{"task_type": task_type}] * tasks
    with Client(urls, timeout_s=60) as client:
        started = time.perf_counter()
        made = client.submit_batches(items, batch=batch, in_flight=in_flight, minimal=True)
        elapsed = time.perf_counter() - started
    if len(made) != tasks:
        raise RuntimeError(f"{len(made)} of {tasks} answered")
    return tasks / elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--tasks", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--in-flight", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4])
    p.add_argument("--rounds", type=int, default=3)
    add_common_flags(p)
    args = p.parse_args(argv)
    with LocalCluster(args.nodes) as cluster:
        report = Report("one producer: submits/s, batches one at a time or several in flight",
                        "bench.producer", args, {"nodes": args.nodes, "tasks": args.tasks,
                                                 "batch": args.batch, "rounds": args.rounds,
                                                 "in_flight": args.in_flight},
                        data_dir=cluster.root)
        cluster.wait_writable()
        report.start()
        rates: dict[int, list[float]] = {n: [] for n in args.in_flight}
        for rnd in range(args.rounds):
            for n in args.in_flight:
                rates[n].append(submit_rate(cluster.urls, args.tasks, args.batch, n))
                report.note(f"round {rnd + 1}, {n} in flight: {rates[n][-1]:,.0f} tasks/s")
        for n, runs in rates.items():
            report.figure(f"producer_submits_per_s_in_flight_{n}", runs, "/s")
        report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
