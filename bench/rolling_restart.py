"""Rolling restart under load: the longest stretch without a completed task.

A steady producer submits `--rate` tasks/s round-robin over the nodes that are up; the
real `tsched.client.Worker` (in this process) runs them with a no-op handler. Each node in
turn gets SIGTERM, is started again, and the next one is stopped only once the restarted
node is ready, caught up and (when the node exports `tsched_raft_peers_connected`)
connected to every peer, as an operator's rolling restart would wait. Completion times are
the state machine's `completed_at` of every task, read at the end; the figure is the
largest gap between consecutive completions from the first SIGTERM to the end of the last
restart (DESIGN.md section 6: a leader hands over before it stops).

    python -m bench.rolling_restart                 # 3 nodes, 3 rounds of restarting each
    python -m bench.rolling_restart --rounds 5 --nodes 5
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import aiohttp

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.api import Api, HttpError, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402

FAILURES = (HttpError, OSError, asyncio.TimeoutError, aiohttp.ClientError)
TARGET_GAP = "<= 0.5 s"
CONNECTED_WAIT_S = 30.0
LIST_PAGE = 1000


def peers_connected(cluster: LocalCluster, node: str) -> int | None:
    """The node's tsched_raft_peers_connected gauge; None when it has none (older nodes)."""
    try:
        import urllib.request
        with urllib.request.urlopen(cluster.url(node) + "/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return -1
    for line in text.splitlines():
        if line.startswith("tsched_raft_peers_connected "):
            return int(float(line.split()[1]))
    return None


def wait_connected(cluster: LocalCluster) -> None:
    deadline = time.monotonic() + CONNECTED_WAIT_S
    want = len(cluster.ids) - 1
    while time.monotonic() < deadline:
        seen = [peers_connected(cluster, i) for i in cluster.ids]
        if None in seen or all(n == want for n in seen):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nodes not all connected within {CONNECTED_WAIT_S} s")


def restart(cluster: LocalCluster, node: str) -> bool:
    """SIGTERM, start again, wait until caught up and connected; True if it was leader."""
    was_leader = cluster.wait_leader() == node
    cluster.kill(node, signal.SIGTERM)
    cluster.procs[node].killed = False    # type: ignore[attr-defined]
    cluster.start_node(node)
    lead = cluster.wait_leader()
    target = (cluster.readiness(lead) or {}).get("applied_seq") or 0
    cluster.wait_applied(node, target)
    wait_connected(cluster)
    return was_leader


async def produce(api: Api, cluster: LocalCluster, task_type: str, rate: float,
                  down: set, counts: dict) -> None:
    i = 0
    while True:
        live = [u for n, u in zip(cluster.ids, cluster.urls) if n not in down]
        try:
            await api.submit_one(live[i % len(live)], {"task_type": task_type}, timeout_s=5)
            counts["submitted"] += 1
        except FAILURES:
            counts["errors"] += 1
        i += 1
        await asyncio.sleep(1.0 / rate)


async def completed_at(api: Api, base: str, task_type: str) -> list[float]:
    tasks = await api.all_tasks(base, f"task_type={task_type}&state=completed&limit={LIST_PAGE}")
    return sorted(datetime.fromisoformat(t["completed_at"].replace("Z", "+00:00")).timestamp()
                  for t in tasks)


def largest_gap(times: list[float], start: float, end: float) -> float:
    inside = [t for t in times if start <= t <= end]
    edges = [start, *inside, end]
    return max(b - a for a, b in zip(edges, edges[1:]))


async def one_round(api: Api, cluster: LocalCluster, args, report: Report, k: int) -> dict:
    from tsched.client import Worker
    task_type = f"roll-{k}-{uuid.uuid4().hex[:6]}"
    counts = {"submitted": 0, "errors": 0}
    down: set = set()

    async def handler(payload, ctx):
        return None

    worker = Worker(cluster.urls, {task_type: handler}, concurrency=20, lease_s=30,
                    worker_id=f"roll-{k}", wait_s=5.0, grace_s=5.0)
    run = asyncio.create_task(worker.run_async())
    load = asyncio.create_task(produce(api, cluster, task_type, args.rate, down, counts))
    await asyncio.sleep(args.warmup_s)         # a steady stream before the first stop
    start = time.time()
    leaders = []
    for node in cluster.ids:
        down.add(node)
        leaders.append(await asyncio.to_thread(restart, cluster, node))
        down.discard(node)
    end = time.time()
    await asyncio.sleep(args.warmup_s)
    load.cancel()
    await asyncio.gather(load, return_exceptions=True)
    worker.stop()
    await asyncio.gather(run, return_exceptions=True)
    times = await completed_at(api, cluster.url(cluster.wait_leader()), task_type)
    gap = largest_gap(times, start, end)
    report.note(f"round {k + 1}: largest gap {gap:.2f} s over {end - start:.1f} s of restarts "
                f"({sum(leaders)} leader stop(s)); {counts['submitted']} submitted, "
                f"{len(times)} completed, {counts['errors']} failed submits")
    return {"gap_s": gap}


async def measure(cluster: LocalCluster, args, report: Report) -> list[dict]:
    async with Api() as api:
        return [await one_round(api, cluster, args, report, k) for k in range(args.rounds)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    p.add_argument("--rounds", type=int, default=3, help="rolling restarts of every node")
    p.add_argument("--rate", type=float, default=50.0, help="tasks/s submitted")
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loop_name = install_fast_loop()
    with LocalCluster(args.nodes, keep=args.keep) as cluster:
        report = Report("rolling restart under load: largest gap between completions",
                        "bench.rolling_restart", args,
                        {"nodes": args.nodes, "rounds": args.rounds, "rate": args.rate,
                         "worker": "tsched.client.Worker, no-op handler", "client_loop": loop_name},
                        data_dir=cluster.root)
        cluster.wait_writable()
        report.start()
        results = asyncio.run(measure(cluster, args, report))
        report.figure("rolling_restart_completion_gap_s", [r["gap_s"] for r in results], "s",
                      TARGET_GAP)
        report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
