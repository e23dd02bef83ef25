"""Submit latency and node memory under 3x the sustainable submit rate (DESIGN 14.2).

A 3-node cluster with `[limits] live_tasks_max` (default 200,000; shedding from 80%).
First closed loops of single submits (priorities 0..10 spread evenly) at rising
concurrency measure the sustainable rate R: the best throughput of the steps (each step is
printed, so a rate still rising at the last step shows). Then an open loop offers 3R
single submits per second for `--duration` seconds, whatever the answers.

The load comes from `--processes` generator processes (bench/lib/open_loop.py): one
asyncio process falls behind reading thousands of answers a second on a busy machine, and
an answer waiting unread in its socket is generator lag, not node latency. Each submit in
flight has a connection of its own (no pool limit), and each answer is timed from the send
(the request's headers written) and from the schedule (when the open loop meant to send
it: this one includes the generator's own lag). Answers are counted by kind: accepted
(201), `overloaded` by reason (`priority`: shed by the state machine; `queue_full`: a
node's proposal queue; `busy`: a node's submits in progress), other error codes, and
transport errors. Every node's RSS is sampled every 5 s; every 30 s a row shows RSS, live
tasks, the CPU each node and the generators used, and what other processes used. Where
the time goes: the nodes' own histogram of time inside the submit handler (/metrics), and
a /healthz of every node twice a second from the quiet main process (the wait on a node's
loop before any handler runs); the rest of a latency from the send is the generators' own
lag in reading answers.
Nothing claims the tasks: live tasks climb to the shedding threshold, where priorities
6-10 are shed, then on with priorities 0-5 to `live_tasks_max`, where every submit is
refused `tenant_limit` and nothing more is accepted. The figure is whether latency stays
bounded and memory flat once they do; a refused submit still passes through Raft (its
answer is not kept in the request table: DESIGN 14.2).

    python -m bench.overload                    # 5 minutes at 3x (the README figure)
    python -m bench.overload --duration 60      # shorter, on a shared machine
"""
from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import os
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import contention, open_loop, stats  # noqa: E402
from bench.lib.api import Api, HttpError, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402

TARGET = "submit p99 bounded (no growth with time), RSS flat once shedding starts"
OVERLOAD_FACTOR = 3
IN_FLIGHT_MAX = 3_000        # open loop, all processes: submits past this are not sent
PROBE_CONCURRENCY = (8, 16, 32, 64, 128)
RSS_EVERY_S = 5.0
WINDOW_S = 30.0              # one printed row per window
PING_EVERY_S = 0.5
START_DELAY_S = 10.0         # the generator processes start together this long after asked
                             # (time to open their connections first)


class Generators:
    """`processes` generator processes sharing one load (open_loop.run in each)."""

    def __init__(self, processes: int, urls: list[str], task_type: str) -> None:
        self.processes, self.urls, self.task_type = processes, urls, task_type
        self.pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))

    async def run(self, mode: str, seconds: float, **share) -> dict:
        """Every process's samples, merged; `share` is divided among the processes."""
        start_at = time.time() + START_DELAY_S
        loop = asyncio.get_running_loop()
        specs = [{"mode": mode, "seconds": seconds, "start_at": start_at, "urls": self.urls,
                  "task_type": self.task_type, "first": k, "step": self.processes,
                  **{key: value / self.processes for key, value in share.items()}}
                 for k in range(self.processes)]
        for spec in specs:
            for key in ("concurrency", "in_flight_max"):
                if key in spec:
                    spec[key] = max(1, int(spec[key]))
        parts = await asyncio.gather(*(loop.run_in_executor(self.pool, open_loop.run, s)
                                       for s in specs))
        return {key: (sum(p[key] for p in parts) if key == "not_sent"
                      else [x for p in parts for x in p[key]]) for key in parts[0]}

    def close(self) -> None:
        self.pool.shutdown()


# --- the sustainable rate -------------------------------------------------------------------

async def probe(gen: Generators, seconds: float, report: Report) -> float:
    """Sustainable submits per second: the best of closed loops at rising concurrency."""
    best = 0.0
    step_s = seconds / len(PROBE_CONCURRENCY)
    for concurrency in PROBE_CONCURRENCY:
        s = await gen.run("closed", step_s, concurrency=concurrency)
        kinds = Counter(s["kind"])
        rate = kinds["accepted"] / step_s
        lat = [ms for k, ms in zip(s["kind"], s["send_ms"]) if k == "accepted"]
        report.note(f"probe: {concurrency} in flight for {step_s:g} s: {rate:.0f} accepted/s, "
                    f"p50 {stats.percentile(lat, 50):.0f} ms, p99 "
                    f"{stats.percentile(lat, 99):.0f} ms, answers {dict(kinds)}")
        best = max(best, rate)
    return best


# --- the open loop, watched -----------------------------------------------------------------

class Watch:
    """Node RSS every RSS_EVERY_S; every WINDOW_S a row of RSS, live tasks and CPU."""

    def __init__(self, cluster: LocalCluster, api: Api, report: Report) -> None:
        self.cluster, self.api, self.report = cluster, api, report
        self.rss: dict[str, list[float]] = {}
        self.ping_ms: list[float] = []
        self.ping_failed = 0

    async def run(self, seconds: float) -> None:
        start = time.monotonic()
        meter, nodes_cpu = contention.Meter().start(), self._nodes_cpu_s()
        next_window = start + WINDOW_S
        while (now := time.monotonic()) - start < seconds:
            self._sample_rss()
            if now >= next_window:
                meter, nodes_cpu = await self._row(now - start, meter, nodes_cpu)
                next_window += WINDOW_S
            await asyncio.sleep(RSS_EVERY_S)
        self._sample_rss()
        await self._row(time.monotonic() - start, meter, nodes_cpu)

    async def ping(self, seconds: float) -> None:
        """/healthz of every node every PING_EVERY_S from this quiet process: its latency is
        the wait on the node's loop (what any request meets before its handler runs)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for url in self.cluster.urls:
                t0 = time.perf_counter()
                try:
                    await self.api.call("GET", url + "/healthz", timeout_s=30)
                    self.ping_ms.append((time.perf_counter() - t0) * 1000)
                except (HttpError, OSError, asyncio.TimeoutError):
                    self.ping_failed += 1
            await asyncio.sleep(PING_EVERY_S)

    def _sample_rss(self) -> None:
        for node in self.cluster.ids:
            if not self.cluster.alive(node):
                raise RuntimeError(f"node {node} exited under load: see {self.cluster.root}")
            self.rss.setdefault(node, []).append(self.cluster.rss_bytes(node) / 2**20)

    def _nodes_cpu_s(self) -> dict[str, float]:
        return {n: _proc_cpu_s(self.cluster.pid(n)) for n in self.cluster.ids}

    async def _row(self, elapsed_s: float, meter, nodes_cpu) -> tuple:
        usage, now_cpu = meter.stop(), self._nodes_cpu_s()
        wall = usage["wall_s"]
        node_cores = {n: (now_cpu[n] - nodes_cpu[n]) / wall for n in now_cpu}
        generators = usage["ours_cores"] - sum(node_cores.values())
        live = await live_tasks(self.api, self.cluster.urls[0])
        mem = ", ".join(f"{n} {series[-1]:.0f}" for n, series in sorted(self.rss.items()))
        cores = ", ".join(f"{n} {c:.2f}" for n, c in node_cores.items())
        self.report.note(f"t={elapsed_s:4.0f} s: live tasks {live}; RSS MiB {mem}; CPU cores "
                         f"{cores}, generators {generators:.2f}, others "
                         f"{usage['others_cores']:.2f}; loadavg {os.getloadavg()[0]:.1f}")
        return contention.Meter().start(), now_cpu


def _proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def live_tasks(api: Api, url: str) -> int | None:
    try:
        by_state = (await api.call("GET", url + "/v1/stats", timeout_s=10))["by_state"]
    except (HttpError, OSError, asyncio.TimeoutError):
        return None
    return by_state.get("pending", 0) + by_state.get("running", 0)


# --- the nodes' own view: time inside the submit handler (their /metrics histogram) -----------

HANDLER_METRIC = "tsched_http_request_duration_seconds"
HANDLER_LABELS = 'method="POST",route="/v1/tasks"'


async def handler_seconds(api: Api, urls: list[str]) -> Counter:
    """Summed over the nodes: cumulative count per bucket bound (`le`), `sum` and `count`."""
    out: Counter = Counter()
    for url in urls:
        async with api.session.get(url + "/metrics") as r:
            text = await r.text()
        for line in text.splitlines():
            if not line.startswith(HANDLER_METRIC) or HANDLER_LABELS not in line:
                continue
            name, value = line.rsplit(" ", 1)
            if name.startswith(HANDLER_METRIC + "_bucket"):
                out[name.rsplit('le="', 1)[1].split('"')[0]] += float(value)
            elif name.startswith(HANDLER_METRIC + "_sum"):
                out["sum"] += float(value)
            elif name.startswith(HANDLER_METRIC + "_count"):
                out["count"] += float(value)
    return out


def report_handler_time(report: Report, before: Counter, after: Counter) -> None:
    """Mean and bucket bounds of the p50/p99 of the submit handler's time at the nodes
    (middleware entry to answer: no wait on the loop before it, no generator lag)."""
    count = after["count"] - before["count"]
    if not count:
        return
    bounds = sorted((float(k), after[k] - before[k]) for k in after if k not in ("sum", "count"))

    def bound(q: float) -> str:
        return next((f"<= {le * 1000:g} ms" for le, n in bounds if n >= q * count), "n/a")
    report.note(f"inside the nodes' submit handler (their /metrics): {count:.0f} submits, "
                f"mean {(after['sum'] - before['sum']) / count * 1000:.0f} ms, p50 {bound(0.5)}, "
                f"p99 {bound(0.99)}")


# --- the figures ----------------------------------------------------------------------------

def report_windows(report: Report, s: dict, seconds: float) -> None:
    """Per window: answers by kind and accepted latency from the send (growth shows here).
    The windows run on past `seconds` while answers to the last submits still come in."""
    for w in range(math.ceil(max([seconds, *s["at_s"]]) / WINDOW_S)):
        lo, hi = w * WINDOW_S, (w + 1) * WINDOW_S
        picked = [i for i, at in enumerate(s["at_s"]) if lo <= at < hi]
        kinds = Counter(s["kind"][i] for i in picked)
        acc = [s["send_ms"][i] for i in picked if s["kind"][i] == "accepted"]
        busy = [s["send_ms"][i] for i in picked if s["kind"][i] in open_loop.SHED_REASONS]
        report.note(f"answered in {lo:.0f}-{hi:.0f} s: {dict(kinds)}; from the send: accepted "
                    f"p50 {stats.percentile(acc, 50):.0f} ms p99 {stats.percentile(acc, 99):.0f}"
                    f" ms, refused p50 {stats.percentile(busy, 50):.0f} ms p99 "
                    f"{stats.percentile(busy, 99):.0f} ms")


def report_answers(report: Report, s: dict, rate: float, seconds: float) -> None:
    kinds = Counter(s["kind"])
    report.note(f"offered {OVERLOAD_FACTOR}x = {rate:.0f}/s for {seconds:g} s: "
                f"{len(s['kind']) + s['not_sent']} offered, answers {dict(kinds)}, not sent "
                f"(generators' in-flight cap {IN_FLIGHT_MAX}) {s['not_sent']}")
    report.note("429 overloaded by reason: "
                + str({k: kinds[k] for k in open_loop.SHED_REASONS}))
    by_kind: dict[str, tuple[list[float], list[float]]] = {}
    for k, send, sched in zip(s["kind"], s["send_ms"], s["schedule_ms"]):
        pair = by_kind.setdefault(k, ([], []))
        if not math.isnan(send):
            pair[0].append(send)
        pair[1].append(sched)
    accepted = by_kind.pop("accepted", ([], []))
    report.distribution("accepted_submit_latency_from_send", accepted[0], "ms", target=TARGET)
    report.distribution("accepted_submit_latency_from_schedule", accepted[1], "ms")
    report.distribution("refused_submit_latency_from_send",
                        [ms for send, _ in by_kind.values() for ms in send], "ms")
    for kind, (send, _sched) in sorted(by_kind.items()):
        report.distribution(f"{kind}_latency_from_send", send, "ms")


def report_rss(report: Report, rss: dict[str, list[float]]) -> None:
    for node, series in sorted(rss.items()):
        mid = series[len(series) // 2]
        report.note(f"{node} RSS MiB start {series[0]:.0f}, middle {mid:.0f}, end "
                    f"{series[-1]:.0f}, max {max(series):.0f} ({len(series)} samples, "
                    f"every {RSS_EVERY_S:g} s)")


async def main_async(args: argparse.Namespace, report: Report) -> None:
    cluster = LocalCluster(nodes=3, keep=args.keep)
    with open(cluster.config_path, "a") as f:   # before the nodes start (entering starts)
        f.write(f"\n[limits]\nlive_tasks_max = {args.live_max}\n"
                f"shed_above = {args.shed_above}\n")
        if args.compaction_min_bytes is not None:
            f.write(f"\n[cluster.compaction]\nmin_bytes = {args.compaction_min_bytes}\n")
    with cluster:
        cluster.wait_writable()
        gen = Generators(args.processes, cluster.urls, f"ovl-{uuid.uuid4().hex[:6]}")
        try:
            rate = await probe(gen, args.probe, report)
            report.figure("sustainable_submits_per_s", [rate], "/s")
            async with Api(connections=8) as api:
                watch = Watch(cluster, api, report)
                offered = OVERLOAD_FACTOR * rate
                before = await handler_seconds(api, cluster.urls)
                samples, _, _ = await asyncio.gather(
                    gen.run("open", args.duration, rate=offered, in_flight_max=IN_FLIGHT_MAX),
                    watch.run(args.duration + START_DELAY_S),
                    watch.ping(args.duration + START_DELAY_S))
                report_handler_time(report, before, await handler_seconds(api, cluster.urls))
                report.distribution("healthz_latency_under_load", watch.ping_ms, "ms")
                report.note(f"healthz failures under load: {watch.ping_failed}")
        finally:
            gen.close()
        report_windows(report, samples, args.duration)
        report_answers(report, samples, offered, args.duration)
        report_rss(report, watch.rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=300.0,
                        help="seconds at 3x the sustainable rate (README figure: 300)")
    parser.add_argument("--probe", type=float, default=20.0,
                        help="seconds of closed loops that measure the sustainable rate")
    parser.add_argument("--processes", type=int, default=4, help="load generator processes")
    parser.add_argument("--live-max", type=int, default=200_000,
                        help="[limits] live_tasks_max of the cluster")
    parser.add_argument("--shed-above", type=float, default=0.8)
    parser.add_argument("--compaction-min-bytes", type=int, default=None,
                        help="[cluster.compaction] min_bytes of the cluster (the Raft log "
                             "tail a node keeps between snapshots; default the node's)")
    parser.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    add_common_flags(parser)
    args = parser.parse_args()
    install_fast_loop()
    config = {"nodes": 3, "live_tasks_max": args.live_max, "shed_above": args.shed_above,
              "duration_s": args.duration, "probe_s": args.probe,
              "probe_concurrency": "/".join(map(str, PROBE_CONCURRENCY)),
              "generator_processes": args.processes, "in_flight_max": IN_FLIGHT_MAX}
    report = Report("Submits at 3x the sustainable rate", "bench.overload", args,
                    config).start()
    asyncio.run(main_async(args, report))
    report.finish()


if __name__ == "__main__":
    main()
