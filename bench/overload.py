"""Submit latency and node memory under 3x the sustainable submit rate (DESIGN 14.2).

A 3-node cluster with `[limits] live_tasks_max` (default 200,000; shedding from 80%).
First closed loops of single submits (priorities 0..10 spread evenly) at rising
concurrency measure the sustainable rate R: the best throughput of the steps (each step's
throughput and latency are printed, so a rate still rising at the last step shows). Then an
open loop offers 3R single submits per second for `--duration` seconds, whatever the
answers. Each submit in flight has a connection of its own (no pool limit: nothing waits
in the generator for a connection), and each answer is timed twice: from the send (the
request's headers written on its connection) and from the schedule (when the open loop
meant to send it: this one includes the generator's own lag on a busy machine). Answers
are counted by kind: accepted (201), `overloaded` by reason (`priority`: shed by the state
machine; `queue_full`: a node's proposal queue; `busy`: a node's submits in progress),
other error codes, and transport errors. Every node's RSS is sampled every 5 s. Nothing
claims the tasks, so live tasks climb to the shedding threshold and stay there: the
figure is whether latency stays bounded and memory flat once they do.

    python -m bench.overload                    # 5 minutes at 3x (the README figure)
    python -m bench.overload --duration 60      # shorter, on a shared machine
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import aiohttp
import orjson

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import stats  # noqa: E402
from bench.lib.api import Api, HttpError, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402

TARGET = "submit p99 bounded (no growth with time), RSS flat once shedding starts"
OVERLOAD_FACTOR = 3
IN_FLIGHT_MAX = 3_000        # open loop: requests beyond this are counted, not sent
PROBE_CONCURRENCY = (8, 16, 32, 64, 128)
RSS_EVERY_S = 5.0
WINDOW_S = 30.0              # one printed row per window
TICK_S = 0.005
SUBMIT_TIMEOUT_S = 60.0
JSON = {"Content-Type": "application/json"}


def _task(task_type: str, i: int) -> dict:
    return {"task_type": task_type, "priority": i % 11, "payload": {"i": i}}


def kind_of(status: int, body) -> str:
    """accepted, the `overloaded` reason (priority, queue_full, busy), or the error code."""
    if status == 201:
        return "accepted"
    err = (body.get("error") or {}) if isinstance(body, dict) else {}
    if status == 429 and err.get("code") == "overloaded":
        return (err.get("details") or {}).get("reason") or "overloaded"
    return err.get("code") or f"http_{status}"


# --- the sustainable rate -------------------------------------------------------------------

async def probe_step(api: Api, urls: list[str], task_type: str, seconds: float,
                     concurrency: int) -> tuple[float, list[float], Counter]:
    """A closed loop of `concurrency` submitters: (accepted/s, latencies ms, answers)."""
    end = time.monotonic() + seconds
    latencies: list[float] = []
    kinds: Counter = Counter()

    async def submitter(c: int) -> None:
        i = c
        while time.monotonic() < end:
            t0 = time.perf_counter()
            try:
                await api.submit_one(urls[i % len(urls)], _task(task_type, i))
                kinds["accepted"] += 1
                latencies.append((time.perf_counter() - t0) * 1000)
            except HttpError as e:
                kinds[kind_of(e.status, e.body)] += 1
            i += concurrency
    await asyncio.gather(*(submitter(c) for c in range(concurrency)))
    return kinds["accepted"] / seconds, latencies, kinds


async def probe(api: Api, urls: list[str], task_type: str, seconds: float,
                report: Report) -> float:
    """Sustainable submits per second: the best of closed loops at rising concurrency."""
    best = 0.0
    step_s = seconds / len(PROBE_CONCURRENCY)
    for concurrency in PROBE_CONCURRENCY:
        rate, lat, kinds = await probe_step(api, urls, task_type, step_s, concurrency)
        report.note(f"probe: {concurrency} in flight for {step_s:g} s: {rate:.0f} accepted/s, "
                    f"p50 {stats.percentile(lat, 50):.0f} ms, p99 {stats.percentile(lat, 99):.0f} "
                    f"ms, answers {dict(kinds)}")
        best = max(best, rate)
    return best


# --- the open loop --------------------------------------------------------------------------

class Sender:
    """Single submits, each on a connection of its own while in flight, timed from the send
    (aiohttp's trace of the request's headers written) to the whole answer read."""

    def __init__(self) -> None:
        trace = aiohttp.TraceConfig()
        trace.on_request_headers_sent.append(self._sent)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),      # no pool limit: nothing queues here
            timeout=aiohttp.ClientTimeout(total=SUBMIT_TIMEOUT_S), trace_configs=[trace])

    @staticmethod
    async def _sent(session, ctx, params) -> None:
        ctx.trace_request_ctx["sent"] = time.perf_counter()

    async def submit(self, url: str, task: dict) -> tuple[str, float | None, float]:
        """(kind, when sent or None, when answered), perf_counter seconds."""
        ctx: dict = {}
        try:
            async with self.session.post(url + "/v1/tasks", data=orjson.dumps(task),
                                         headers=JSON, trace_request_ctx=ctx) as r:
                raw = await r.read()
                kind = kind_of(r.status, orjson.loads(raw) if raw else None)
        except (aiohttp.ClientError, asyncio.TimeoutError, orjson.JSONDecodeError) as e:
            kind = f"transport:{type(e).__name__}"
        return kind, ctx.get("sent"), time.perf_counter()

    async def close(self) -> None:
        await self.session.close()


class Tally:
    """Answers by kind, their latencies from the send and from the schedule, per window."""

    def __init__(self) -> None:
        self.kinds: Counter = Counter()
        self.from_send: dict[str, list[float]] = {}
        self.from_schedule: dict[str, list[float]] = {}
        self.window_kinds: Counter = Counter()
        self.window_accepted_send: list[float] = []
        self.not_sent = 0

    def add(self, kind: str, due: float, sent: float | None, answered: float) -> None:
        self.kinds[kind] += 1
        self.window_kinds[kind] += 1
        self.from_schedule.setdefault(kind, []).append((answered - due) * 1000)
        if sent is not None:
            ms = (answered - sent) * 1000
            self.from_send.setdefault(kind, []).append(ms)
            if kind == "accepted":
                self.window_accepted_send.append(ms)

    def close_window(self) -> tuple[Counter, list[float]]:
        out = (self.window_kinds, self.window_accepted_send)
        self.window_kinds, self.window_accepted_send = Counter(), []
        return out


class CpuShares:
    """CPU used by each node and by this load generator since the last call, in cores: where
    the time goes (a generator at its share of the machine measures its own lag too)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.last = self._now()

    def _now(self) -> dict[str, float]:
        out = {n: _proc_cpu_s(self.cluster.pid(n)) for n in self.cluster.ids}
        t = os.times()
        out["generator"] = t.user + t.system
        out["wall"] = time.perf_counter()
        return out

    def since_last(self) -> dict[str, float]:
        now = self._now()
        wall = now["wall"] - self.last["wall"]
        out = {k: (now[k] - self.last[k]) / wall for k in now if k != "wall"}
        self.last = now
        return out


def _proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sample_rss(cluster: LocalCluster, rss: dict[str, list[float]]) -> None:
    for node in cluster.ids:
        if not cluster.alive(node):
            raise RuntimeError(f"node {node} exited under load: see {cluster.root}")
        rss.setdefault(node, []).append(cluster.rss_bytes(node) / 2**20)


async def live_tasks(api: Api, url: str) -> int | None:
    try:
        by_state = (await api.call("GET", url + "/v1/stats", timeout_s=10))["by_state"]
    except (HttpError, aiohttp.ClientError, asyncio.TimeoutError):
        return None
    return by_state.get("pending", 0) + by_state.get("running", 0)


async def print_window(report: Report, api: Api, cluster: LocalCluster, tally: Tally,
                       elapsed_s: float, rss: dict[str, list[float]], cpu: CpuShares) -> None:
    kinds, accepted_ms = tally.close_window()
    live = await live_tasks(api, cluster.urls[0])
    mem = ", ".join(f"{n} {series[-1]:.0f}" for n, series in sorted(rss.items()))
    cores = ", ".join(f"{k} {v:.2f}" for k, v in cpu.since_last().items())
    report.note(f"t={elapsed_s:4.0f} s: answers {dict(kinds)}; accepted from the send p50 "
                f"{stats.percentile(accepted_ms, 50):.0f} ms, p99 "
                f"{stats.percentile(accepted_ms, 99):.0f} ms; live tasks {live}; "
                f"RSS MiB {mem}; CPU cores {cores}; "
                f"load {' '.join(f'{x:.1f}' for x in _loadavg())}")


def _loadavg() -> tuple[float, ...]:
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


async def offer(sender: Sender, api: Api, cluster: LocalCluster, task_type: str,
                rate: float, seconds: float, rss: dict, report: Report) -> Tally:
    """The open loop: `rate` submits/s for `seconds`, answers tallied by kind."""
    tally = Tally()
    cpu = CpuShares(cluster)
    in_flight = 0
    start = time.perf_counter()

    async def one(i: int, due: float) -> None:
        nonlocal in_flight
        kind, sent, answered = await sender.submit(cluster.urls[i % len(cluster.urls)],
                                                   _task(task_type, i))
        tally.add(kind, due, sent, answered)
        in_flight -= 1

    sent = 0
    next_rss, next_window = start, start + WINDOW_S
    tasks: set = set()
    while (now := time.perf_counter()) - start < seconds:
        while sent < int((now - start) * rate):
            if in_flight >= IN_FLIGHT_MAX:
                tally.not_sent += 1
            else:
                in_flight += 1
                t = asyncio.ensure_future(one(sent, start + sent / rate))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            sent += 1
        if now >= next_rss:
            sample_rss(cluster, rss)
            next_rss += RSS_EVERY_S
        if now >= next_window:
            await print_window(report, api, cluster, tally, now - start, rss, cpu)
            next_window += WINDOW_S
        await asyncio.sleep(TICK_S)
    if tasks:
        await asyncio.wait(tasks, timeout=SUBMIT_TIMEOUT_S + 30)
    sample_rss(cluster, rss)
    await print_window(report, api, cluster, tally, time.perf_counter() - start, rss,
                       cpu)
    return tally


def report_tally(report: Report, tally: Tally, rate: float, seconds: float) -> None:
    offered = sum(tally.kinds.values()) + tally.not_sent
    report.note(f"offered {OVERLOAD_FACTOR}x = {rate:.0f}/s for {seconds:g} s: {offered} "
                f"offered, answers {dict(tally.kinds)}, not sent (generator in-flight cap "
                f"{IN_FLIGHT_MAX}) {tally.not_sent}")
    shed = {k: v for k, v in tally.kinds.items() if k in ("priority", "queue_full", "busy")}
    report.note(f"429 overloaded by reason: {shed}")
    report.distribution("accepted_submit_latency_from_send",
                        tally.from_send.get("accepted", []), "ms", target=TARGET)
    report.distribution("accepted_submit_latency_from_schedule",
                        tally.from_schedule.get("accepted", []), "ms")
    refused = [ms for k, v in tally.from_send.items() if k != "accepted" for ms in v]
    report.distribution("refused_submit_latency_from_send", refused, "ms")
    for kind in sorted(k for k in tally.from_send if k != "accepted"):
        report.distribution(f"{kind}_latency_from_send", tally.from_send[kind], "ms")


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
    with cluster:
        cluster.wait_writable()
        task_type = f"ovl-{uuid.uuid4().hex[:6]}"
        async with Api(connections=256) as api:
            rate = await probe(api, cluster.urls, task_type, args.probe, report)
            report.figure("sustainable_submits_per_s", [rate], "/s")
            rss: dict[str, list[float]] = {}
            sender = Sender()
            try:
                tally = await offer(sender, api, cluster, task_type, OVERLOAD_FACTOR * rate,
                                    args.duration, rss, report)
            finally:
                await sender.close()
        report_tally(report, tally, OVERLOAD_FACTOR * rate, args.duration)
        report_rss(report, rss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=300.0,
                        help="seconds at 3x the sustainable rate (README figure: 300)")
    parser.add_argument("--probe", type=float, default=20.0,
                        help="seconds of closed loops that measure the sustainable rate")
    parser.add_argument("--live-max", type=int, default=200_000,
                        help="[limits] live_tasks_max of the cluster")
    parser.add_argument("--shed-above", type=float, default=0.8)
    parser.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    add_common_flags(parser)
    args = parser.parse_args()
    install_fast_loop()
    config = {"nodes": 3, "live_tasks_max": args.live_max, "shed_above": args.shed_above,
              "duration_s": args.duration, "probe_s": args.probe,
              "probe_concurrency": "/".join(map(str, PROBE_CONCURRENCY)),
              "in_flight_max": IN_FLIGHT_MAX}
    report = Report("Submits at 3x the sustainable rate", "bench.overload", args,
                    config).start()
    asyncio.run(main_async(args, report))
    report.finish()


if __name__ == "__main__":
    main()
