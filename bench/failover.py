"""Leader SIGKILL under load: time to the first successful write and the first successful
claim on the new leader, over N kills.

A background producer submits small batches and a background worker claims and completes
them through every node. For each kill: a few probe tasks (due now) are submitted, the
leader's process gets SIGKILL, and probe loops on every surviving node then send
  - single-task submits (1 s timeout each) until one is acknowledged, and
  - claims for the probe tasks (max_tasks 1) until one returns a task.
Both clocks start at the kill. The killed node is restarted and caught up before the next
kill (it may or may not become leader again).

    python -m bench.failover                   # 10 kills, 3 nodes
    python -m bench.failover --kills 30 --nodes 5
    python -m bench.failover --shards 4 --kills 5   # a node leading shards: each shard's
                                                   # first write (bench/failover_shards.py)
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import uuid
from pathlib import Path

import aiohttp

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.api import Api, HttpError, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402

FAILURES = (HttpError, OSError, asyncio.TimeoutError, aiohttp.ClientError)
TARGET_WRITE = "<= 3 s"
PROBE_TIMEOUT_S = 1.0
RECOVERY_MAX_S = 30.0


class Background:
    """Steady load: batches of submits and claim+complete loops, errors counted, not fatal."""

    def __init__(self, api: Api, urls: list[str], batch: int, pause_s: float,
                 tenants: list[str] | None = None) -> None:
        self.api, self.urls, self.batch, self.pause_s = api, urls, batch, pause_s
        self.tenants = tenants or []     # with shards: the batch spread over these
        self.task_type = f"load-{uuid.uuid4().hex[:6]}"
        self.submitted = self.completed = self.errors = 0
        self.live: list[str] = list(urls)

    async def produce(self, i: int) -> None:
        while True:
            base = self.live[i % len(self.live)]
            try:
                created = await self.api.submit(base, self._batch(), timeout_s=5)
                self.submitted += len(created)
            except FAILURES:
                self.errors += 1
                i += 1
            await asyncio.sleep(self.pause_s)  # offered load: one batch per pause

    def _batch(self) -> list[dict]:
        if not self.tenants:
            return [{"task_type": self.task_type}] * self.batch
        return [{"task_type": self.task_type, "tenant": self.tenants[j % len(self.tenants)]}
                for j in range(self.batch)]

    @contextlib.asynccontextmanager
    async def running(self, report: Report):
        """2 producers and 2 claim+complete loops while the block runs; their totals noted."""
        load = [asyncio.create_task(self.produce(i)) for i in range(2)]
        load += [asyncio.create_task(self.consume(i)) for i in range(2)]
        try:
            yield self
        finally:
            for t in load:
                t.cancel()
            await asyncio.gather(*load, return_exceptions=True)
        report.note(f"background load: {self.submitted} submitted, {self.completed} completed, "
                    f"{self.errors} failed calls (expected around kills)")

    async def consume(self, i: int) -> None:
        while True:
            base = self.live[i % len(self.live)]
            try:
                tasks = await self.api.claim(base, f"load-w{i}", [self.task_type], 100, 1.0,
                                             timeout_s=5)
                if tasks:
                    await self.api.complete_many(base, tasks, result={}, timeout_s=5)
                    self.completed += len(tasks)
            except FAILURES:
                self.errors += 1
                i += 1
                await asyncio.sleep(0.05)  # back off from a failing node


async def first_success(attempt, bases: list[str]) -> float:
    """perf_counter of the first `attempt(base)` that returns True, racing every node."""
    done = asyncio.Event()
    first: list[float] = []

    async def loop(base: str) -> None:
        while not done.is_set():
            try:
                ok = await attempt(base)
            except FAILURES:
                ok = False
                await asyncio.sleep(0.02)  # a refused connection returns at once: don't spin
            if ok and not done.is_set():
                first.append(time.perf_counter())
                done.set()

    loops = [asyncio.create_task(loop(b)) for b in bases]
    try:
        await asyncio.wait_for(done.wait(), RECOVERY_MAX_S)
    except asyncio.TimeoutError:
        pass
    for t in loops:
        t.cancel()
    await asyncio.gather(*loops, return_exceptions=True)
    return first[0] if first else float("nan")


async def one_kill(api: Api, cluster: LocalCluster, bg: Background, k: int) -> dict:
    leader = await asyncio.to_thread(cluster.wait_leader)
    probe_type = f"probe-{k}-{uuid.uuid4().hex[:4]}"
    await api.submit(cluster.url(leader), [{"task_type": probe_type}] * 10, timeout_s=10)
    survivors = [cluster.url(i) for i in cluster.ids if i != leader]
    bg.live[:] = survivors

    async def write(base: str) -> bool:
        await api.submit_one(base, {"task_type": f"{probe_type}-w"}, timeout_s=PROBE_TIMEOUT_S)
        return True

    async def claim(base: str) -> bool:
        got = await api.claim(base, f"probe-{k}", [probe_type], 1, 0.5,
                              timeout_s=PROBE_TIMEOUT_S + 0.5)
        return bool(got)

    t_kill = time.perf_counter()
    await asyncio.to_thread(cluster.kill, leader)
    t_write, t_claim = await asyncio.gather(first_success(write, survivors),
                                            first_success(claim, survivors))
    new_leader = await asyncio.to_thread(cluster.wait_leader)
    cluster.start_node(leader)
    await asyncio.to_thread(wait_caught_up, cluster, leader)
    bg.live[:] = cluster.urls
    return {"killed": leader, "new_leader": new_leader,
            "write_s": t_write - t_kill, "claim_s": t_claim - t_kill}


def wait_caught_up(cluster: LocalCluster, node_id: str) -> None:
    """Until the restarted node is ready and has applied what the leader had applied."""
    lead = cluster.wait_leader()
    target = (cluster.readiness(lead) or {}).get("applied_seq") or 0
    cluster.wait_applied(node_id, target)


async def measure(cluster: LocalCluster, kills: int, report: Report, batch: int,
                  pause_s: float) -> list[dict]:
    async with Api() as api:
        bg = Background(api, cluster.urls, batch, pause_s)
        results = []
        async with bg.running(report):
            for k in range(kills):
                r = await one_kill(api, cluster, bg, k)
                report.note(f"kill {k + 1}: leader {r['killed']} -> {r['new_leader']}: first write "
                            f"{r['write_s']:.2f} s, first claim {r['claim_s']:.2f} s")
                results.append(r)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=3, choices=(3, 5))
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--shards", type=int, default=1,
                   help="kill a node that leads shards; time each shard it led")
    p.add_argument("--load-batch", type=int, default=50, help="tasks per background submit")
    p.add_argument("--load-pause-s", type=float, default=0.05, help="pause between batches per producer")
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loop_name = install_fast_loop()
    with LocalCluster(args.nodes, keep=args.keep, shards=args.shards) as cluster:
        report = Report("leader SIGKILL: time to first write and first claim on the new leader",
                        "bench.failover", args,
                        {"nodes": args.nodes, "shards": args.shards, "kills": args.kills,
                         "background": f"2 producers x {args.load_batch} tasks / {args.load_pause_s} s, "
                                       "2 claim+complete loops",
                         "probe_timeout_s": PROBE_TIMEOUT_S, "client_loop": loop_name},
                        data_dir=cluster.root)
        cluster.wait_writable()
        report.start()
        if args.shards > 1:
            from bench import failover_shards
            results = asyncio.run(failover_shards.measure(cluster, args.kills, report,
                                                          args.load_batch, args.load_pause_s))
            failover_shards.figures(results, report, TARGET_WRITE)
            report.finish()
            return 0
        results = asyncio.run(measure(cluster, args.kills, report, args.load_batch, args.load_pause_s))
        report.figure("failover_first_write_s", [r["write_s"] for r in results], "s", TARGET_WRITE)
        report.figure("failover_first_claim_s", [r["claim_s"] for r in results], "s")
        report.distribution("failover_first_write_ms_all_kills", [r["write_s"] * 1000 for r in results], "ms")
        report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
