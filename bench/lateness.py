"""Lateness of timed tasks: handler start - run_at, at 1,000 timed tasks/s over 30 s.

A producer submits, every 100 ms, the next 100 ms worth of tasks (batched, run_at spread
evenly, `--lead-s` ahead of time). Workers (`tsched.client.Worker`, in a separate process)
are already waiting. Two modes, each its own run on the same cluster:
  prefetch    - the Worker's early dispatch (prefetch_ms 250): the node hands out tasks
                due within 250 ms, the worker starts each at run_at by its own clock;
  no-prefetch - prefetch_ms 0: a task is handed out only once due, by the leader's timer.

    python -m bench.lateness                     # both modes, 30 s each
    python -m bench.lateness --duration-s 10 --modes prefetch
    python -m bench.lateness --baseline 3483ebd --rounds 2   # A/B against that Worker
    python -m bench.lateness --nodes-of 43d0e1b              # that revision's nodes
    python -m bench.lateness --compiled          # nodes with the compiled state machine

Besides lateness it prints what each task cost the cluster: Raft entries applied and HTTP
requests served (all nodes, forwarded ones counted at both) per task; and each garbage
collector generation's longest pause on any node (every task due meanwhile waits for it).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.api import Api, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.lib.revision import (  # noqa: E402
    add_compiled_flag, compiled_tree, extract_client, extract_tree, nodes_build)
from bench.lifecycle import longest_gc_pauses, report_gc_pauses  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"prefetch": "p99 <= 5 ms, and <= Celery + Redis", "no-prefetch": "p99 <= 50 ms"}
PREFETCH_MS = {"prefetch": 250, "no-prefetch": 0}


@dataclass
class Config:
    rate_per_s: int = 1000
    duration_s: float = 30.0
    lead_s: float = 1.0
    tick_s: float = 0.1
    workers: int = 4
    concurrency: int = 100
    drain_s: float = 15.0       # how long after the last run_at missing starts are awaited


def schedule(cfg: Config, t0_ms: float) -> list[list[int]]:
    """run_at (epoch ms) of every task, grouped per producer tick."""
    per_tick = max(1, round(cfg.rate_per_s * cfg.tick_s))
    ticks = max(1, round(cfg.duration_s / cfg.tick_s))
    step_ms = 1000.0 / cfg.rate_per_s
    return [[round(t0_ms + (k * per_tick + j) * step_ms) for j in range(per_tick)]
            for k in range(ticks)]


async def produce(submit, cfg: Config, plan: list[list[int]], t_begin: float) -> tuple[int, int]:
    """Submits each tick's batch `lead_s` before its first run_at; returns (acked, errors).

    `submit(run_ats) -> awaitable count` does the actual sending (tsched or Celery)."""
    pending: list[asyncio.Task] = []
    for k, run_ats in enumerate(plan):
        delay = t_begin + k * cfg.tick_s - time.time()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing the offered load, not synchronisation
        pending.append(asyncio.create_task(submit(run_ats)))
    outcomes = await asyncio.gather(*pending, return_exceptions=True)
    acked = sum(o for o in outcomes if isinstance(o, int))
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    for e in errors[:3]:
        print(f"  !! submit failed: {e!r}", file=sys.stderr)
    return acked, len(errors)


class WorkerProcess:
    """bench.lib.timed_worker in a child process, read line by line."""

    def __init__(self, urls: list[str], task_type: str, prefetch_ms: int, cfg: Config,
                 client_dir: str | None = None) -> None:
        self.argv = [sys.executable, "-m", "bench.lib.timed_worker", "--urls", ",".join(urls),
                     "--task-type", task_type, "--prefetch-ms", str(prefetch_ms),
                     "--workers", str(cfg.workers), "--concurrency", str(cfg.concurrency)]
        if client_dir:
            self.argv += ["--client-dir", client_dir]
        fd, self.out = tempfile.mkstemp(prefix="tsched-lateness-", suffix=".json")
        os.close(fd)
        self.argv += ["--out", self.out]
        self.count = 0

    async def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
            env=env, cwd=str(REPO), start_new_session=True)
        self.ready = asyncio.Event()
        self.reader = asyncio.create_task(self._read())
        await asyncio.wait_for(self.ready.wait(), 30)

    async def _read(self) -> None:
        async for raw in self.proc.stdout:
            line = raw.decode().strip()
            if line == "ready":
                self.ready.set()
            elif line.startswith("count "):
                self.count = int(line.split()[1])

    async def wait_count(self, n: int, deadline: float) -> None:
        while self.count < n and time.time() < deadline and self.proc.returncode is None:
            await asyncio.sleep(0.1)  # polling the child's progress lines, bounded by deadline

    async def stop(self) -> list[float]:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 60)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        await asyncio.gather(self.reader, return_exceptions=True)
        if self.proc.returncode != 0:
            print(f"  !! worker process exit status {self.proc.returncode}", file=sys.stderr)
        try:
            with open(self.out) as f:
                return [float(line) for line in f if line.strip()]
        finally:
            os.unlink(self.out)


_REQUESTS = re.compile(r"^tsched_http_request_duration_seconds_count\{[^}]*\} (\S+)$", re.M)


async def cluster_cost(api: Api, urls: list[str]) -> tuple[int, float]:
    """(Raft entries applied, HTTP requests served by all nodes) so far."""
    seqs, requests = [], 0.0
    for url in urls:
        seqs.append((await api.call("GET", url + "/v1/cluster/self"))["applied_seq"])
        async with api.session.get(url + "/metrics") as r:
            requests += sum(float(v) for v in _REQUESTS.findall(await r.text()))
    return max(seqs), requests


async def run_mode(urls: list[str], cfg: Config, mode: str, client_dir: str | None = None) -> dict:
    """One lateness run against tsched; returns {"samples", "acked", "errors", "missing",
    "entries_per_task", "requests_per_task"}."""
    task_type = f"late-{mode}-{uuid.uuid4().hex[:6]}"
    worker = WorkerProcess(urls, task_type, PREFETCH_MS[mode], cfg, client_dir)
    await worker.start()
    async with Api() as api:
        seq0, req0 = await cluster_cost(api, urls)
        rr = iter(range(1 << 62))

        async def submit(run_ats: list[int]) -> int:
            base = urls[next(rr) % len(urls)]
            tasks = [{"task_type": task_type, "run_at": ms / 1000.0, "payload": {"run_at_ms": ms}}
                     for ms in run_ats]
            return len(await api.submit(base, tasks, timeout_s=10))

        t_begin = time.time()
        plan = schedule(cfg, (t_begin + cfg.lead_s) * 1000.0)
        acked, errors = await produce(submit, cfg, plan, t_begin)
        await worker.wait_count(acked, plan[-1][-1] / 1000.0 + cfg.drain_s)
        samples = await worker.stop()
        seq1, req1 = await cluster_cost(api, urls)
    n = max(acked, 1)
    return {"samples": samples, "acked": acked, "errors": errors,
            "missing": max(0, acked - len(samples)), "entries_per_task": (seq1 - seq0) / n,
            "requests_per_task": (req1 - req0) / n}


async def _gc_pauses(urls: list[str]) -> dict[str, float]:
    """Every task due while a node collects waits for it: the longest pause per generation."""
    async with Api() as api:
        return await longest_gc_pauses(api, urls)


def describe_mode(mode: str, r: dict) -> str:
    cost = (f"; per task {r['entries_per_task']:.3f} Raft entries, "
            f"{r['requests_per_task']:.3f} HTTP requests" if "entries_per_task" in r else "")
    return (f"{mode}: {len(r['samples'])} of {r['acked']} acknowledged tasks started "
            f"({r['missing']} missing, {r['errors']} failed submits){cost}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = Config()
    p.add_argument("--nodes", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--shards", type=int, default=1,
                   help="[cluster] shards (the default tenant's shard does the work)")
    p.add_argument("--rate", type=int, default=d.rate_per_s, help="timed tasks per second")
    p.add_argument("--duration-s", type=float, default=d.duration_s)
    p.add_argument("--lead-s", type=float, default=d.lead_s, help="how far ahead tasks are submitted")
    p.add_argument("--workers", type=int, default=d.workers, help="Worker instances")
    p.add_argument("--concurrency", type=int, default=d.concurrency, help="per Worker (<= 100)")
    p.add_argument("--modes", default="prefetch,no-prefetch")
    p.add_argument("--baseline", metavar="REV",
                   help="also run this revision's Worker (git rev), alternating with this one")
    p.add_argument("--rounds", type=int, default=1, help="runs of each mode (and side)")
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    p.add_argument("--nodes-of", metavar="REV", help="run that git revision's nodes instead")
    add_compiled_flag(p)
    add_common_flags(p)
    return p.parse_args(argv)


def config_from(args: argparse.Namespace) -> Config:
    return Config(rate_per_s=args.rate, duration_s=args.duration_s, lead_s=args.lead_s,
                  workers=args.workers, concurrency=args.concurrency)


def nodes_env(args: argparse.Namespace, tmp: str) -> dict[str, str] | None:
    """The nodes' PYTHONPATH: another revision's tree, the compiled build, or this checkout."""
    if args.nodes_of and args.compiled:
        raise SystemExit("--nodes-of and --compiled: choose one")
    if args.nodes_of:
        return {"PYTHONPATH": extract_tree(args.nodes_of, tmp)}
    if args.compiled:
        return {"PYTHONPATH": compiled_tree(os.path.join(tmp, "compiled"))}
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in PREFETCH_MS for m in modes):
        raise SystemExit(f"--modes: choose from {', '.join(PREFETCH_MS)}")
    loop_name = install_fast_loop()
    cfg = config_from(args)
    with tempfile.TemporaryDirectory(prefix="tsched-bench-client-") as tmp, \
            tempfile.TemporaryDirectory(prefix="tsched-bench-nodes-") as nodes_tmp, \
            LocalCluster(args.nodes, keep=args.keep, shards=args.shards,
                         env=nodes_env(args, nodes_tmp)) as cluster:
        sides: dict[str, str | None] = {"": None}
        if args.baseline:
            sides = {"_baseline": extract_client(args.baseline, tmp), "": None}
        report = Report("lateness of timed tasks (handler start - run_at)", "bench.lateness", args,
                        {"nodes": args.nodes, "shards": args.shards, **asdict(cfg),
                         "modes": ",".join(modes), "client_loop": loop_name,
                         "baseline": args.baseline or "-", "rounds": args.rounds,
                         "nodes_of": args.nodes_of or "this code",
                         "state_machine": nodes_build(args)},
                        data_dir=cluster.root)
        cluster.wait_writable()
        report.start()
        results: dict[str, list[dict]] = {}
        for _ in range(args.rounds):
            for mode in modes:
                for side, client_dir in sides.items():
                    r = asyncio.run(run_mode(cluster.urls, cfg, mode, client_dir))
                    report.note(f"{side.strip('_') or 'current'} " + describe_mode(mode, r))
                    results.setdefault(mode.replace("-", "_") + side, []).append(r)
        for key, runs in results.items():
            report.distribution(f"lateness_ms_{key}", [x for r in runs for x in r["samples"]], "ms",
                                None if key.endswith("_baseline") else TARGETS[key.replace("_", "-")])
            report.figure(f"raft_entries_per_task_{key}", [r["entries_per_task"] for r in runs], "")
            report.figure(f"http_requests_per_task_{key}", [r["requests_per_task"] for r in runs], "")
        report_gc_pauses(report, "nodes", asyncio.run(_gc_pauses(cluster.urls)))
        report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
