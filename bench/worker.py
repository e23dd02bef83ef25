"""End-to-end tasks/s of ONE Worker process with a no-op handler, draining a backlog.

For each concurrency (4 and 32 by default) a fresh backlog of N tasks is submitted (batches
of 1,000), then one `tsched.client.Worker` process (`bench/lib/noop_worker.py`) starts and
runs them all; the figure is N / (time from the Worker's start until every outcome was
acknowledged). With `--baseline REV` the Worker of another revision (its `client/`, taken
with `git archive`) runs the same backlog in alternating rounds on the same cluster: an A/B
in one run.

    python -m bench.worker                               # 3 nodes, 2 rounds x 20,000 tasks
    python -m bench.worker --baseline 3483ebd --rounds 3 # against that revision's Worker
    python -m bench.worker --concurrency 4 --handler async
    python -m bench.worker --nocarry        # also with completions never riding on claims
    python -m bench.worker --concurrency 4 --baseline 95ec80f --baseline-nodes --rounds 3
        # each side on fresh clusters of its own revision's nodes too (an A/B of node code)
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import contention  # noqa: E402
from bench.lib.api import Api  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.lib.revision import (add_compiled_flag, compiled_tree, extract_client,  # noqa: E402
                                extract_tree, nodes_build)

REPO = Path(__file__).resolve().parents[1]
TARGET = ">= 6,000 /s at concurrency 4"
SUBMIT_BATCH = 1000
RUN_TIMEOUT_S = 300.0


async def fill(api: Api, urls: list[str], task_type: str, n: int) -> None:
    for i, start in enumerate(range(0, n, SUBMIT_BATCH)):
        count = min(SUBMIT_BATCH, n - start)
        await api.submit(urls[i % len(urls)], [{"task_type": task_type}] * count, timeout_s=30)


class CpuShares:
    """Cores each node used, and the whole machine, between `start` and `shares` (from
    /proc): where a drain's CPU went, and how much of the machine was busy."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids

    def _now(self) -> tuple[float, dict[str, float], float]:
        cpu = {}
        for node, pid in self.pids.items():
            st = contention._proc_stat(pid)
            cpu[node] = st[1] if st else 0.0
        return time.monotonic(), cpu, contention.machine_busy_s() or 0.0

    def start(self) -> None:
        self._t0, self._cpu0, self._busy0 = self._now()

    def shares(self) -> str:
        t1, cpu1, busy1 = self._now()
        span_s = max(t1 - self._t0, 1e-9)
        nodes = ", ".join(f"{n} {(cpu1[n] - self._cpu0[n]) / span_s:.2f}" for n in self.pids)
        return f"nodes' cores: {nodes}; machine busy {(busy1 - self._busy0) / span_s:.2f} of 2"


async def drain(urls: list[str], task_type: str, n: int, concurrency: int, handler: str,
                client_dir: str | None, carry: bool = True) -> tuple[float, float]:
    """(tasks/s, the Worker process's CPU ms per task) over a backlog of n tasks."""
    argv = [sys.executable, "-m", "bench.lib.noop_worker", "--urls", ",".join(urls),
            "--task-type", task_type, "--count", str(n), "--concurrency", str(concurrency),
            "--handler", handler]
    if client_dir:
        argv += ["--client-dir", client_dir]
    if not carry:
        argv.append("--no-carry")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stdin=asyncio.subprocess.DEVNULL, env=env,
                                                cwd=str(REPO), start_new_session=True)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"the Worker did not finish {n} tasks in {RUN_TIMEOUT_S} s") from None
    done = [line for line in out.decode().splitlines() if line.startswith("done ")]
    if proc.returncode != 0 or not done:
        raise RuntimeError(f"worker process failed (exit {proc.returncode}): {out.decode()[-500:]}")
    _, seconds, ran, cpu_s = done[-1].split()
    return int(ran) / float(seconds), float(cpu_s) * 1000 / max(int(ran), 1)


Results = dict[tuple[str, int], list[tuple[float, float]]]


async def measure(urls: list[str], args: argparse.Namespace, sides: dict[str, str | None],
                  report: Report, cpu: CpuShares, rounds: range | None = None) -> Results:
    results: Results = {}
    async with Api() as api:
        for rnd in rounds or range(args.rounds):
            for conc in args.concurrency:
                for side, client_dir in sides.items():
                    task_type = f"noop-{side}-{conc}-{uuid.uuid4().hex[:6]}"
                    await fill(api, urls, task_type, args.tasks)
                    cpu.start()
                    rate, cpu_ms = await drain(urls, task_type, args.tasks, conc, args.handler,
                                               client_dir, carry=side != "nocarry")
                    report.note(f"round {rnd + 1}, concurrency {conc}, {side}: {rate:,.0f} tasks/s, "
                                f"Worker process {cpu_ms:.3f} ms CPU per task "
                                f"({rate * cpu_ms / 1000:.2f} cores); {cpu.shares()}")
                    results.setdefault((side, conc), []).append((rate, cpu_ms))
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--tasks", type=int, default=20_000, help="backlog per run")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[4, 32],
                   help="comma-separated, one run each per round")
    p.add_argument("--handler", choices=("sync", "async"), default="sync",
                   help="a no-op in the thread pool (sync) or on the loop (async)")
    p.add_argument("--baseline", metavar="REV", help="also run this revision's Worker (git rev)")
    p.add_argument("--baseline-nodes", action="store_true",
                   help="with --baseline: each round runs each side on a fresh cluster of its "
                        "own revision's nodes (else both Workers share this code's cluster)")
    p.add_argument("--nocarry", action="store_true",
                   help="also run this Worker with completions never riding on claims")
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    add_compiled_flag(p)
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tsched-bench-client-") as tmp:
        sides: dict[str, str | None] = {"current": None}
        if args.baseline:
            sides = {"baseline": extract_client(args.baseline, tmp), "current": None}
        if args.nocarry:
            sides["nocarry"] = None
        if args.baseline_nodes:
            return fresh_clusters(args, sides, tmp)
        nodes_path = compiled_tree(os.path.join(tmp, "compiled")) if args.compiled else None
        with LocalCluster(args.nodes, keep=args.keep,
                          env={"PYTHONPATH": nodes_path} if nodes_path else None) as cluster:
            report = Report("one Worker process, no-op handler: tasks/s end to end", "bench.worker",
                            args, {"nodes": args.nodes, "tasks": args.tasks, "rounds": args.rounds,
                                   "concurrency": args.concurrency, "handler": args.handler,
                                   "baseline": args.baseline or "-",
                                   "state_machine": nodes_build(args)},
                            data_dir=cluster.root)
            cluster.wait_writable()
            report.start()
            cpu = CpuShares({i: cluster.pid(i) for i in cluster.ids})
            results = asyncio.run(measure(cluster.urls, args, sides, report, cpu))
            figures(report, results)
    return 0


def figures(report: Report, results: Results) -> None:
    for (side, conc), runs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        suffix = "" if side == "current" else f"_{side}"
        report.figure(f"worker_tasks_per_s_c{conc}{suffix}", [r for r, _ in runs], "/s",
                      TARGET if conc == 4 and side == "current" else None)
        report.figure(f"worker_cpu_ms_per_task_c{conc}{suffix}", [c for _, c in runs], "ms")
    report.finish()


def fresh_clusters(args: argparse.Namespace, sides: dict[str, str | None], tmp: str) -> int:
    """`--baseline-nodes`: each round, each side on a fresh cluster of its own revision's
    nodes (the baseline's node/, statemachine/ and client/ on PYTHONPATH), its own Worker."""
    if not args.baseline or args.compiled:
        raise SystemExit("--baseline-nodes needs --baseline REV (and the Python build)")
    trees = {"baseline": extract_tree(args.baseline, os.path.join(tmp, "nodes"))}
    report = Report("one Worker process, no-op handler: tasks/s end to end", "bench.worker",
                    args, {"nodes": args.nodes, "tasks": args.tasks, "rounds": args.rounds,
                           "concurrency": args.concurrency, "handler": args.handler,
                           "baseline": f"{args.baseline} (its nodes and Worker)",
                           "state_machine": nodes_build(args)},
                    data_dir=tempfile.gettempdir())
    report.start()
    results: Results = {}
    for rnd in range(args.rounds):
        for side, client_dir in sides.items():
            path = trees.get(side)
            with LocalCluster(args.nodes, keep=args.keep,
                              env={"PYTHONPATH": path} if path else None) as cluster:
                cluster.wait_writable()
                cpu = CpuShares({i: cluster.pid(i) for i in cluster.ids})
                got = asyncio.run(measure(cluster.urls, args, {side: client_dir}, report, cpu,
                                          rounds=range(rnd, rnd + 1)))
            for key, runs in got.items():
                results.setdefault(key, []).extend(runs)
    figures(report, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
