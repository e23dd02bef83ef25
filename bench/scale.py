"""Scale: memory per pending task, claim time as pending tasks grow, and restart time.

Fills a cluster with pending, due tasks (batched submits) up to each level, then measures
  - node RSS above the empty node's, divided by the pending count (every node);
  - claim time at that level: sequential claims (max_tasks 1, and 100) to the leader, each
    completed afterwards so the pending count stays put;
  - at the last level, SIGKILL of a follower and its restart: process start -> the first
    read it answers at the sequence it had applied before the kill;
  - the time of `GET /v1/cluster` (which hashes every replica's whole state).

    python -m bench.scale                      # levels 10K, 100K (about a minute)
    python -m bench.scale --max 1000000        # adds 1M (several minutes) and its restart
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
from bench.failover import FAILURES  # noqa: E402

LEVELS = (10_000, 100_000, 1_000_000)
TARGET_MEM = "1,000,000 pending within 1 GiB RSS (<= ~1,070 B/task)"
TARGET_RESTART = "<= 15 s at 1,000,000 tasks"
TARGET_CLAIM = "flat from 10K to 1M (O(log n))"
MIB = 1024 * 1024
FILL_TENANTS = 4


async def fill(api: Api, urls: list[str], task_type: str, count: int, batch: int,
               producers: int) -> str:
    """Submits `count` due tasks; returns the id of the last one acknowledged."""
    last: list[str] = []
    left = [count]

    async def producer(i: int) -> None:
        while left[0] > 0:
            n = min(batch, left[0])
            left[0] -= n
            # Spread over tenants: one tenant may hold at most 1,000,000 live tasks.
            tenant = f"scale-{i % FILL_TENANTS}"
            tasks = [{"task_type": task_type, "tenant": tenant, "payload": {"n": k}} for k in range(n)]
            for _attempt in range(5):
                try:
                    created = await api.submit(urls[i % len(urls)], tasks, timeout_s=60)
                    last.append(created[-1]["task_id"])
                    break
                except FAILURES as e:  # retried: a lost batch would skew the per-task figure
                    print(f"  !! fill batch failed ({e}); retrying", file=sys.stderr)
                    await asyncio.sleep(1.0)
            else:
                raise RuntimeError("fill: a batch failed 5 times")

    await asyncio.gather(*(producer(i) for i in range(producers)))
    return last[-1]


async def wait_all_applied(cluster: LocalCluster) -> int:
    """Until every node has applied the leader's current sequence; returns it."""
    lead = await asyncio.to_thread(cluster.wait_leader)
    target = (await asyncio.to_thread(cluster.readiness, lead) or {}).get("applied_seq") or 0
    for i in cluster.ids:
        await asyncio.to_thread(cluster.wait_applied, i, target)
    return target


async def live_tasks(api: Api, base: str) -> int:
    """Pending + running tasks of the fill's tenants, as the cluster counts them (a fill
    batch retried after an ambiguous timeout may have been applied twice)."""
    body = await api.call("GET", base + "/v1/tenants", timeout_s=60)
    return sum(t["pending"] + t["running"] for t in body["tenants"]
               if t["tenant"].startswith("scale-"))


async def status_call_ms(api: Api, base: str, n: int = 2) -> list[float]:
    """GET /v1/cluster, which hashes each replica's whole state (for its digest)."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await api.call("GET", base + "/v1/cluster", timeout_s=600)
        out.append((time.perf_counter() - t) * 1000)
    return out


async def claim_times_ms(api: Api, base: str, task_type: str, max_tasks: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        tasks = await api.claim(base, "scale-probe", [task_type], max_tasks, 0, timeout_s=30)
        out.append((time.perf_counter() - t) * 1000)
        if tasks:
            await api.complete_many(base, tasks, result={}, timeout_s=30)
    return out


async def restart_s(api: Api, cluster: LocalCluster, node_id: str, task_id: str) -> float:
    seq = (await asyncio.to_thread(cluster.readiness, node_id) or {}).get("applied_seq") or 0
    await asyncio.to_thread(cluster.kill, node_id)
    t0 = time.perf_counter()
    cluster.start_node(node_id)
    url = f"{cluster.url(node_id)}/v1/tasks/{task_id}?min_seq={seq}"
    deadline = t0 + 300
    while time.perf_counter() < deadline:
        try:
            await api.call("GET", url, timeout_s=2)
            return time.perf_counter() - t0
        except FAILURES:
            await asyncio.sleep(0.05)  # the node is still starting: poll, bounded
    return float("nan")


async def measure_restart(api: Api, cluster: LocalCluster, task_id: str, pending: int,
                          report: Report) -> None:
    lead = await asyncio.to_thread(cluster.wait_leader)
    follower = next(i for i in cluster.ids if i != lead)
    took = await restart_s(api, cluster, follower, task_id)
    report.figure(f"restart_to_first_read_s_at_{pending}", [took], "s",
                  TARGET_RESTART if pending >= LEVELS[-1] else None)
    await wait_all_applied(cluster)


async def measure(cluster: LocalCluster, levels: list[int], args: argparse.Namespace,
                  report: Report) -> None:
    task_type = f"fill-{uuid.uuid4().hex[:6]}"
    async with Api() as api:
        await wait_all_applied(cluster)
        base_rss = {i: cluster.rss_bytes(i) for i in cluster.ids}
        report.note("empty RSS: " + ", ".join(f"{i}={b / MIB:.0f} MiB" for i, b in base_rss.items()))
        pending, last_id = 0, ""
        claims: dict[int, list[float]] = {}
        for level in levels:
            t = time.perf_counter()
            last_id = await fill(api, cluster.urls, task_type, level - pending, args.batch, args.producers)
            fill_s = time.perf_counter() - t
            report.note(f"filled {pending:,} -> {level:,} pending in {fill_s:.1f} s "
                        f"({(level - pending) / fill_s:,.0f} submits/s)")
            pending = level
            await wait_all_applied(cluster)
            held = await live_tasks(api, cluster.url(cluster.wait_leader()))
            if held != level:
                report.note(f"the cluster holds {held:,} live fill tasks (timed claims completed some; a retried batch may add some)")
            per_task = {i: (cluster.rss_bytes(i) - base_rss[i]) / held for i in cluster.ids}
            report.note(f"{level:,} pending: RSS " + ", ".join(
                f"{i}={cluster.rss_bytes(i) / MIB:.0f} MiB ({per_task[i]:,.0f} B/task)" for i in cluster.ids))
            report.figure(f"bytes_per_pending_task_at_{level}", [max(per_task.values())], "B",
                          TARGET_MEM if level == LEVELS[-1] else None)
            lead = cluster.wait_leader()
            one = await claim_times_ms(api, cluster.url(lead), task_type, 1, args.claims)
            hundred = await claim_times_ms(api, cluster.url(lead), task_type, 100, args.claims)
            claims[level] = one
            report.distribution(f"claim_ms_max1_at_{level}", one, "ms", TARGET_CLAIM)
            report.distribution(f"claim_ms_max100_at_{level}", hundred, "ms")
            if level == levels[-1] and not args.no_restart:
                await measure_restart(api, cluster, last_id, level, report)
            # Last: each call hashes every replica's state under its lock, which stalls
            # apply on every node for as long (and may cost the cluster its leader).
            report.distribution(f"cluster_status_ms_at_{level}",
                                await status_call_ms(api, cluster.url(cluster.wait_leader())), "ms")
        if len(claims) > 1:
            lo, hi = min(claims), max(claims)
            report.figure(f"claim_p50_ratio_{hi}_over_{lo}",
                          [stats.median(claims[hi]) / stats.median(claims[lo])], "x", "about 1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--max", type=int, default=100_000, help="largest level of pending tasks")
    p.add_argument("--claims", type=int, default=30, help="claims timed per level and size")
    p.add_argument("--batch", type=int, default=1000, help="tasks per fill submit (<= 1000)")
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--no-restart", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    levels = [lv for lv in LEVELS if lv <= args.max] or [args.max]
    loop_name = install_fast_loop()
    with LocalCluster(args.nodes, keep=args.keep) as cluster:
        report = Report("scale: memory per pending task, claim time, restart time", "bench.scale",
                        args, {"nodes": args.nodes, "levels": "/".join(f"{lv:,}" for lv in levels),
                               "payload": '{"n": int}', "tenants": FILL_TENANTS, "claims_per_level": args.claims,
                               "fill_batch": args.batch, "client_loop": loop_name},
                        data_dir=cluster.root)
        cluster.wait_writable()
        report.start()
        asyncio.run(measure(cluster, levels, args, report))
        report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
