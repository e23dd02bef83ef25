"""Submit acknowledgement latency of a single task at light load.

One client sends single-task submits (`POST /v1/tasks`, one task, no batching) one after
another, round-robin over the nodes, on keep-alive connections; each sample is the time
from sending the request to reading the 201. A submit through a follower includes its
hop to the leader, so samples are also split by the role of the node asked.

    python -m bench.latency                    # 3 runs x 300 submits
    python -m bench.latency --samples 2000 --concurrency 4
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import stats  # noqa: E402
from bench.lib.api import Api, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402

TARGET = "p50 <= 15 ms, p99 <= 40 ms"


async def run_once(api: Api, cluster: LocalCluster, samples: int, concurrency: int) -> dict:
    """Returns {"all": [ms], "leader": [ms], "follower": [ms], "errors": n}."""
    leader = cluster.wait_leader()
    out: dict = {"all": [], "leader": [], "follower": [], "errors": 0}
    task_type = f"lat-{uuid.uuid4().hex[:6]}"
    counter = iter(range(samples))

    async def client(c: int) -> None:
        for i in counter:
            node = cluster.ids[(i + c) % len(cluster.ids)]
            t = time.perf_counter()
            try:
                await api.submit_one(cluster.url(node), {"task_type": task_type, "payload": {"i": i}},
                                     timeout_s=10)
            except Exception as e:  # noqa: BLE001 - counted and shown, never a figure
                out["errors"] += 1
                print(f"  !! submit failed: {e!r}", file=sys.stderr)
                continue
            ms = (time.perf_counter() - t) * 1000
            out["all"].append(ms)
            out["leader" if node == leader else "follower"].append(ms)

    await asyncio.gather(*(client(c) for c in range(concurrency)))
    return out


async def measure(cluster: LocalCluster, args: argparse.Namespace, report: Report) -> list[dict]:
    async with Api() as api:
        await run_once(api, cluster, 50, 1)  # warm-up: connections, code paths
        runs = []
        for r in range(args.runs):
            res = await run_once(api, cluster, args.samples, args.concurrency)
            s = stats.summary(res["all"])
            report.note(f"run {r + 1}: p50 {s['p50']:.2f} ms, p99 {s['p99']:.2f} ms, "
                        f"max {s['max']:.2f} ms over {s['n']} submits, {res['errors']} errors")
            runs.append(res)
    return runs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--shards", type=int, default=1,
                   help="[cluster] shards (the default tenant's shard does the work)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--samples", type=int, default=300, help="submits per run")
    p.add_argument("--concurrency", type=int, default=1, help="clients in flight (light load: 1)")
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loop_name = install_fast_loop()
    with LocalCluster(args.nodes, keep=args.keep, shards=args.shards) as cluster:
        report = Report("single-task submit acknowledgement latency, light load", "bench.latency",
                        args, {"nodes": args.nodes, "shards": args.shards, "runs": args.runs, "samples": args.samples,
                               "concurrency": args.concurrency, "client_loop": loop_name,
                               "durability": "node default (fsync)"}, data_dir=cluster.root)
        cluster.wait_writable()
        report.start()
        runs = asyncio.run(measure(cluster, args, report))
        report.figure("submit_ack_p50_ms", [stats.percentile(r["all"], 50) for r in runs], "ms",
                      "<= 15 ms")
        report.figure("submit_ack_p99_ms", [stats.percentile(r["all"], 99) for r in runs], "ms",
                      "<= 40 ms")
        report.distribution("submit_ack_ms_all_runs", [x for r in runs for x in r["all"]], "ms", TARGET)
        report.distribution("submit_ack_ms_via_leader", [x for r in runs for x in r["leader"]], "ms")
        report.distribution("submit_ack_ms_via_follower", [x for r in runs for x in r["follower"]], "ms")
        report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
