"""Claims in flight at a leader kill: how long until the worker gets their tasks.

A steady producer submits `--rate` tasks/s round-robin over the live nodes; the real
`tsched.client.Worker` (in this process, lease 30 s) runs them with a handler that notes
when it started. The leader gets SIGKILL `--kills` times (restarted and caught up between
kills). A claim that committed on the killed leader but whose answer died with it used to
leave its tasks leased to nobody until the lease ran out; the client now asks again with
the same Idempotency-Key and the next leader answers from its request table.

Figure: for every task, handler start - its `created_at` (the state machine's), over all
tasks; the tail is what a kill costs. Also the number of tasks that started more than 5 s
after they were created.

    python -m bench.claim_failover                 # 5 kills, 3 nodes
    python -m bench.claim_failover --kills 10
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.api import Api, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.rolling_restart import produce  # noqa: E402

TARGET = "p99 <= 5 s (within the failover time)"
LATE_S = 5.0
LEASE_S = 30
SETTLE_S = 3.0     # load after the last kill before stopping


def epoch_s(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


async def measure(cluster: LocalCluster, args, report: Report) -> list[float]:
    from tsched.client import Worker
    task_type = f"inflight-{uuid.uuid4().hex[:6]}"
    started: dict[str, float] = {}
    created: dict[str, float] = {}

    async def handler(payload, ctx):
        started.setdefault(ctx.task_id, time.time())

    down: set = set()
    counts = {"submitted": 0, "errors": 0}
    async with Api() as api:
        worker = Worker(cluster.urls, {task_type: handler}, concurrency=20, lease_s=LEASE_S,
                        worker_id="inflight", wait_s=5.0, grace_s=5.0)
        run = asyncio.create_task(worker.run_async())
        load = asyncio.create_task(produce(api, cluster, task_type, args.rate, down, counts))
        for k in range(args.kills):
            await asyncio.sleep(args.between_s)
            lead = await asyncio.to_thread(cluster.wait_leader)
            down.add(lead)
            await asyncio.to_thread(cluster.kill, lead)
            await asyncio.to_thread(cluster.wait_leader)
            cluster.procs[lead].killed = False   # type: ignore[attr-defined]
            cluster.start_node(lead)
            new = await asyncio.to_thread(cluster.wait_leader)
            target = (cluster.readiness(new) or {}).get("applied_seq") or 0
            await asyncio.to_thread(cluster.wait_applied, lead, target)
            down.discard(lead)
            report.note(f"kill {k + 1}: leader {lead} -> {new}")
        await asyncio.sleep(SETTLE_S)
        load.cancel()
        await asyncio.gather(load, return_exceptions=True)
        deadline = time.monotonic() + LEASE_S + 10   # what is still leased comes back
        base = cluster.url(cluster.wait_leader())
        while time.monotonic() < deadline:
            if all(t["state"] == "completed" for t in await collect(api, base, task_type)):
                break
            await asyncio.sleep(0.5)
        worker.stop()
        await asyncio.gather(run, return_exceptions=True)
        for t in await collect(api, base, task_type):
            created[t["task_id"]] = epoch_s(t["created_at"])
    report.note(f"{counts['submitted']} submitted, {len(started)} started, "
                f"{counts['errors']} failed submits")
    return [started[t] - created[t] for t in created if t in started]


async def collect(api: Api, base: str, task_type: str) -> list[dict]:
    return await api.all_tasks(base, f"task_type={task_type}&limit=1000")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--rate", type=float, default=100.0, help="tasks/s submitted")
    p.add_argument("--between-s", type=float, default=2.0, help="steady load before each kill")
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loop_name = install_fast_loop()
    with LocalCluster(3, keep=args.keep) as cluster:
        report = Report("claims in flight at a leader kill: task created -> handler start",
                        "bench.claim_failover", args,
                        {"nodes": 3, "kills": args.kills, "rate": args.rate, "lease_s": LEASE_S,
                         "worker": "tsched.client.Worker", "client_loop": loop_name},
                        data_dir=cluster.root)
        cluster.wait_writable()
        report.start()
        delays = asyncio.run(measure(cluster, args, report))
        report.distribution("claim_failover_start_delay_ms", [d * 1000 for d in delays], "ms",
                            TARGET)
        report.figure("claim_failover_tasks_started_late", [sum(d > LATE_S for d in delays)], "")
        report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
