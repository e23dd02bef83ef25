"""The Raft log written beside the Raft thread (issue 51): an A/B of node code in one run.

For each round, this code's nodes and the baseline's (`--baseline REV`, taken with
`git archive`) each get a fresh 3-node cluster, alternating, and run the same two loads:
- black-box batching lifecycles (bench/lifecycle.py's run: 4 producers submit batches of
  500, 8 claim loops complete in one request): lifecycles/s;
- one `Worker` process of 4 slots (bench/lib/noop_worker.py, this checkout's client on both
  sides) draining a backlog of no-op tasks: tasks/s.
Also per side: the leader's busiest thread's CPU seconds per wall second over both loads
(from /proc/<pid>/task; the Raft thread on a loaded leader) and the leader's whole CPU.

    python -m bench.log_writer --baseline 4f57ee2 --rounds 2
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import lifecycle, worker  # noqa: E402
from bench.lib.api import Api  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.lib.revision import extract_tree  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of `pid`."""
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


async def loads(urls: list[str], args: argparse.Namespace, report: Report, tag: str) -> dict:
    cfg = lifecycle.Config(tasks=args.tasks, batch=500)
    async with Api() as api:
        await lifecycle.run_once(api, urls, lifecycle.Config(tasks=2000, batch=500), "warmup")
        life = await lifecycle.run_once(api, urls, cfg)
        task_type = f"noop-{uuid.uuid4().hex[:6]}"
        await worker.fill(api, urls, task_type, args.worker_tasks)
    rate, _cpu = await worker.drain(urls, task_type, args.worker_tasks, 4, "sync", None)
    report.note(f"{tag}: {life['tasks_per_s']:,.0f} lifecycles/s "
                f"({life['completed']}/{life['acked']}); Worker of 4 slots {rate:,.0f} tasks/s")
    return {"life": life["tasks_per_s"], "worker": rate}


def start_py_spy(pid: int, out: str) -> subprocess.Popen | None:
    """py-spy sampling the leader (every thread, idle samples too), when it is installed."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.path.exists(exe):
        return None
    return subprocess.Popen([exe, "record", "--idle", "--threads", "--nonblocking",
                             "--format", "raw", "-r", "100", "-p", str(pid), "-o", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def raft_thread_shares(raw: str) -> tuple[float, float]:
    """From py-spy's collapsed stacks: (share of the Raft thread's samples not idle in its
    poll, share in the log's commit: `LmdbJournal.sync`/`_commit_write` on that thread)."""
    by_thread: dict[str, list[tuple[str, int]]] = {}
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        by_thread.setdefault(stack.split(";", 1)[0], []).append((stack, int(count)))
    raft = [v for v in by_thread.values() if any("_onTick" in s for s, _ in v)]
    if not raft:
        return float("nan"), float("nan")
    samples = max(raft, key=lambda v: sum(c for _, c in v))
    total = sum(c for _, c in samples)
    idle = sum(c for s, c in samples if "poll (" in s.rsplit(";", 1)[-1])
    syncing = sum(c for s, c in samples if "sync (tsched/node/raft/journal.py" in s
                  or "_commit_write (" in s and "_write_loop" not in s)
    return (total - idle) / max(total, 1), syncing / max(total, 1)


def one_side(args: argparse.Namespace, path: str | None, report: Report, tag: str) -> dict:
    with LocalCluster(3, env={"PYTHONPATH": path} if path else None) as cluster:
        cluster.wait_writable()
        leader = cluster.wait_leader()
        pid = cluster.pid(leader)
        profile = os.path.join(cluster.root, "leader.pyspy")
        spy = start_py_spy(pid, profile) if args.py_spy else None
        before, t0 = thread_cpu_s(pid), time.monotonic()
        got = asyncio.run(loads(cluster.urls, args, report, tag))
        after, wall = thread_cpu_s(pid), time.monotonic() - t0
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=30)
            busy, syncing = raft_thread_shares(Path(profile).read_text() if os.path.exists(profile) else "")
            got["raft_busy"], got["raft_in_sync"] = busy, syncing
            report.note(f"{tag}: py-spy: the leader's Raft thread busy {busy:.0%} of its "
                        f"samples, in the log's commit {syncing:.0%}")
    used = {t: after[t] - before.get(t, 0.0) for t in after}
    got["busiest_thread"] = max(used.values()) / wall
    got["leader_cpu"] = sum(used.values()) / wall
    report.note(f"{tag}: leader's busiest thread {got['busiest_thread']:.2f} CPU s per s, "
                f"the leader {got['leader_cpu']:.2f} (over {wall:.0f} s)")
    return got


FIGURES = (("life", "lifecycles_per_s", "/s"), ("worker", "worker_c4_tasks_per_s", "/s"),
           ("busiest_thread", "leader_busiest_thread_cpu", "s/s"),
           ("leader_cpu", "leader_cpu", "s/s"),
           ("raft_busy", "leader_raft_thread_busy_share", ""),
           ("raft_in_sync", "leader_raft_thread_in_log_commit_share", ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", metavar="REV", required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tasks", type=int, default=20_000, help="lifecycles per run")
    p.add_argument("--worker-tasks", type=int, default=20_000, help="the Worker's backlog")
    p.add_argument("--py-spy", action="store_true",
                   help="sample the leader with py-spy: its Raft thread's busy share and the "
                        "share of it in the log's commit")
    add_common_flags(p)
    args = p.parse_args(argv)
    lifecycle.install_fast_loop()
    report = Report("log writer A/B: lifecycles/s and a 4-slot Worker's tasks/s",
                    "bench.log_writer", args, {"baseline": args.baseline, "rounds": args.rounds,
                                               "tasks": args.tasks,
                                               "worker_tasks": args.worker_tasks},
                    data_dir=tempfile.gettempdir())
    with tempfile.TemporaryDirectory(prefix="tsched-bench-nodes-") as tmp:
        sides = {"_baseline": extract_tree(args.baseline, tmp), "": None}
        report.start()
        results: dict[str, list[dict]] = {s: [] for s in sides}
        for rnd in range(args.rounds):
            for side, path in sides.items():
                tag = f"round {rnd + 1}, " + (f"{args.baseline} (baseline)" if side else "this code")
                results[side].append(one_side(args, path, report, tag))
    for side, runs in results.items():
        for key, name, unit in FIGURES:
            if all(key in r for r in runs):
                report.figure(name + side, [r[key] for r in runs], unit)
    report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
