"""Submit latency and node memory under 3x the sustainable submit rate (DESIGN 14.2).

A 3-node cluster with `[limits] live_tasks_max` (default 200,000; shedding from 80%). First
a closed loop (`--concurrency` single submits in flight, priorities 0..10 spread evenly)
measures the sustainable rate R for `--probe` seconds. Then an open loop offers 3R single
submits per second for `--duration` seconds, whatever the answers: each answer's latency
(201 and 429 alike) is recorded, 429s are counted by reason (`priority`: shed by the state
machine; `queue_full`: a node's proposal queue), and every node's RSS is sampled. Nothing
claims the tasks, so live tasks climb to the shedding threshold and stay there: the figure
is whether latency stays bounded and memory flat once they do.

    python -m bench.overload                    # 5 minutes at 3x (the README figure)
    python -m bench.overload --duration 60      # shorter, on a shared machine
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
from bench.lib.api import Api, HttpError, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402

TARGET = "submit p99 bounded (no growth with time), RSS flat once shedding starts"
OVERLOAD_FACTOR = 3
IN_FLIGHT_MAX = 4_000        # open loop: requests beyond this are counted, not sent
RSS_EVERY_S = 5.0
TICK_S = 0.01


def _task(task_type: str, i: int) -> dict:
    return {"task_type": task_type, "priority": i % 11, "payload": {"i": i}}


async def probe(api: Api, cluster: LocalCluster, task_type: str, seconds: float,
                concurrency: int) -> float:
    """Sustainable submits per second: a closed loop of `concurrency` submitters."""
    end = time.monotonic() + seconds
    done = 0

    async def submitter(c: int) -> None:
        nonlocal done
        i = c
        while time.monotonic() < end:
            try:
                await api.submit_one(cluster.urls[i % len(cluster.urls)], _task(task_type, i))
                done += 1
            except HttpError:
                pass
            i += concurrency
    await asyncio.gather(*(submitter(c) for c in range(concurrency)))
    return done / seconds


async def offer(api: Api, cluster: LocalCluster, task_type: str, rate: float,
                seconds: float, rss: dict) -> dict:
    """The open loop: `rate` submits/s for `seconds`, answers recorded by kind."""
    out = {"accepted_ms": [], "shed_ms": [], "priority": 0, "queue_full": 0, "other": 0,
           "not_sent": 0, "sent": 0, "p99_by_minute": []}
    in_flight = 0
    start = time.monotonic()
    minute: list[float] = []

    async def one(i: int) -> None:
        nonlocal in_flight
        t0 = time.perf_counter()
        try:
            await api.submit_one(cluster.urls[i % len(cluster.urls)], _task(task_type, i),
                                 timeout_s=60)
            ms = (time.perf_counter() - t0) * 1000
            out["accepted_ms"].append(ms)
        except HttpError as e:
            ms = (time.perf_counter() - t0) * 1000
            reason = ((e.body or {}).get("error") or {}).get("details", {}).get("reason")
            if e.status == 429 and reason in ("priority", "queue_full"):
                out[reason] += 1
                out["shed_ms"].append(ms)
            else:
                out["other"] += 1
        except Exception:   # noqa: BLE001 - a timeout or a reset: counted, the loop goes on
            ms = (time.perf_counter() - t0) * 1000
            out["other"] += 1
        minute.append(ms)
        in_flight -= 1

    sent = 0
    next_rss = start
    tasks = set()
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * rate)
        while sent < due:
            if in_flight >= IN_FLIGHT_MAX:
                out["not_sent"] += 1
            else:
                in_flight += 1
                t = asyncio.ensure_future(one(sent))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            sent += 1
        if now >= next_rss:
            for node in cluster.ids:
                if not cluster.alive(node):
                    raise RuntimeError(f"node {node} exited under load: see {cluster.root}")
                rss.setdefault(node, []).append(cluster.rss_bytes(node) / 2**20)
            next_rss += RSS_EVERY_S
        if len(minute) >= max(1, int(rate * 60)):
            out["p99_by_minute"].append(stats.percentile(minute, 99))
            minute.clear()
        await asyncio.sleep(TICK_S)
    out["sent"] = sent
    if tasks:
        await asyncio.wait(tasks, timeout=90)
    if minute:
        out["p99_by_minute"].append(stats.percentile(minute, 99))
    return out


async def main_async(args: argparse.Namespace, report: Report) -> None:
    cluster = LocalCluster(nodes=3, keep=args.keep)
    with open(cluster.config_path, "a") as f:   # before the nodes start (entering starts)
        f.write(f"\n[limits]\nlive_tasks_max = {args.live_max}\n"
                f"shed_above = {args.shed_above}\n")
    with cluster:
        cluster.wait_writable()
        task_type = f"ovl-{uuid.uuid4().hex[:6]}"
        async with Api(connections=512) as api:
            rate = await probe(api, cluster, task_type, args.probe, args.concurrency)
            report.figure("sustainable_submits_per_s", [rate], "/s")
            rss: dict[str, list[float]] = {}
            out = await offer(api, cluster, task_type, OVERLOAD_FACTOR * rate, args.duration,
                              rss)
        report.note(f"offered {OVERLOAD_FACTOR}x = {OVERLOAD_FACTOR * rate:.0f}/s for "
                    f"{args.duration:g} s: sent {out['sent']}, accepted "
                    f"{len(out['accepted_ms'])}, shed (priority) {out['priority']}, "
                    f"refused (queue_full) {out['queue_full']}, other errors {out['other']}, "
                    f"not sent (client in-flight cap) {out['not_sent']}")
        report.distribution("accepted_submit_latency", out["accepted_ms"], "ms", target=TARGET)
        report.distribution("refused_submit_latency", out["shed_ms"], "ms")
        report.note("submit p99 per minute (ms): "
                    + ", ".join(f"{x:.0f}" for x in out["p99_by_minute"]))
        for node, series in sorted(rss.items()):
            report.note(f"{node} RSS MiB first {series[0]:.0f}, max {max(series):.0f}, "
                        f"last {series[-1]:.0f} ({len(series)} samples, every {RSS_EVERY_S:g} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=300.0,
                        help="seconds at 3x the sustainable rate (README figure: 300)")
    parser.add_argument("--probe", type=float, default=10.0,
                        help="seconds of the closed loop that measures the sustainable rate")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--live-max", type=int, default=200_000,
                        help="[limits] live_tasks_max of the cluster")
    parser.add_argument("--shed-above", type=float, default=0.8)
    parser.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    add_common_flags(parser)
    args = parser.parse_args()
    install_fast_loop()
    config = {"nodes": 3, "live_tasks_max": args.live_max, "shed_above": args.shed_above,
              "duration_s": args.duration, "probe_s": args.probe,
              "probe_concurrency": args.concurrency}
    report = Report("Submits at 3x the sustainable rate", "bench.overload", args,
                    config).start()
    asyncio.run(main_async(args, report))
    report.finish()


if __name__ == "__main__":
    main()
