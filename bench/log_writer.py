"""The Raft log written beside the Raft thread: an A/B of node code in one run.

For each round, this code's nodes and the baseline's (`--baseline REV`, taken with
`git archive`) each get a fresh 3-node cluster, alternating, and run the same two loads:
- black-box batching lifecycles (bench/lifecycle.py's run: 4 producers submit batches of
  500, 8 claim loops complete in one request): lifecycles/s;
- one `Worker` process of 4 slots (bench/lib/noop_worker.py, this checkout's client on both
  sides) draining a backlog of no-op tasks: tasks/s.
Also per side: the leader's busiest thread's CPU seconds per wall second over both loads
(from /proc/<pid>/task; the Raft thread on a loaded leader) and the leader's whole CPU; per
load, every node's threads' CPU seconds per second, named as `py-spy dump` names them when
py-spy is installed, and the share of the machine's cores busy.

    python -m bench.log_writer --baseline 4f57ee2 --rounds 2
    python -m bench.log_writer --baseline 4f57ee2 --rounds 2 --sync-delay-us 1000
        # both sides on a disk whose fsync takes 1 ms longer (bench/lib/slow_disk.py)
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
from bench.lib import contention  # noqa: E402
from bench.lib.api import Api  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.lib.revision import extract_tree  # noqa: E402
from bench.lib.slow_disk import slow_disk_env  # noqa: E402

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


def py_spy() -> str | None:
    """The py-spy program, on PATH or beside this interpreter; None when not installed."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return exe if os.path.exists(exe) else None


def thread_names(pid: int) -> dict[int, str]:
    """Thread id -> Python thread name, from one `py-spy dump` ({} without py-spy)."""
    exe = py_spy()
    if exe is None:
        return {}
    out = subprocess.run([exe, "dump", "--nonblocking", "-p", str(pid)], capture_output=True,
                         text=True, timeout=30).stdout
    names = {}
    for line in out.splitlines():
        if line.startswith("Thread ") and '"' in line:
            tid = line.split()[1]
            if tid.isdigit():
                names[int(tid)] = line.split('"')[1]
    return names


class Cpu:
    """Per-thread CPU of every node over one phase of the load, and the machine's."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.names = {node: thread_names(pid) for node, pid in pids.items()}
        self._t0 = time.monotonic()
        self._busy0 = contention.machine_busy_s() or 0.0
        self._threads0 = {node: thread_cpu_s(pid) for node, pid in pids.items()}

    def end(self) -> dict:
        wall = time.monotonic() - self._t0
        busy = ((contention.machine_busy_s() or 0.0) - self._busy0) / wall
        per_node = {}
        for node, pid in self.pids.items():
            after, before = thread_cpu_s(pid), self._threads0[node]
            used = {t: (after[t] - before.get(t, 0.0)) / wall for t in after}
            per_node[node] = {self.names[node].get(t, f"tid {t}"): u
                              for t, u in sorted(used.items(), key=lambda kv: -kv[1])
                              if u >= 0.01}
        return {"wall_s": wall, "machine_busy": busy, "threads": per_node}


def describe_cpu(cpu: dict, leader: str) -> str:
    parts = []
    for node, threads in cpu["threads"].items():
        role = "leader" if node == leader else "follower"
        parts.append(f"{node} ({role}) {sum(threads.values()):.2f}: " + ", ".join(
            f"{name} {u:.2f}" for name, u in threads.items()))
    return (f"machine busy {cpu['machine_busy']:.2f} of {os.cpu_count()} cores; "
            + "; ".join(parts))


async def lifecycle_load(urls: list[str], args: argparse.Namespace,
                         pids: dict[str, int]) -> tuple[dict, dict]:
    async with Api() as api:
        await lifecycle.run_once(api, urls, lifecycle.Config(tasks=2000, batch=500), "warmup")
        cpu = Cpu(pids)
        life = await lifecycle.run_once(api, urls, lifecycle.Config(tasks=args.tasks, batch=500))
        return life, cpu.end()


async def fill_backlog(urls: list[str], tasks: int) -> str:
    task_type = f"noop-{uuid.uuid4().hex[:6]}"
    async with Api() as api:
        await worker.fill(api, urls, task_type, tasks)
    return task_type


def loads(urls: list[str], args: argparse.Namespace, report: Report, tag: str,
          pids: dict[str, int], leader: str) -> dict:
    life, life_cpu = asyncio.run(lifecycle_load(urls, args, pids))
    task_type = asyncio.run(fill_backlog(urls, args.worker_tasks))
    cpu = Cpu(pids)
    rate, _cpu = asyncio.run(worker.drain(urls, task_type, args.worker_tasks, 4, "sync", None))
    worker_cpu = cpu.end()
    report.note(f"{tag}: {life['tasks_per_s']:,.0f} lifecycles/s "
                f"({life['completed']}/{life['acked']}); Worker of 4 slots {rate:,.0f} tasks/s")
    report.note(f"{tag}: CPU s per s during the lifecycles: {describe_cpu(life_cpu, leader)}")
    report.note(f"{tag}: CPU s per s during the Worker's drain: {describe_cpu(worker_cpu, leader)}")
    return {"life": life["tasks_per_s"], "worker": rate,
            "life_busy": life_cpu["machine_busy"], "worker_busy": worker_cpu["machine_busy"]}


def start_py_spy(pid: int, out: str) -> subprocess.Popen | None:
    """py-spy sampling the leader (every thread, idle samples too), when it is installed."""
    exe = py_spy()
    if exe is None:
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


def one_side(args: argparse.Namespace, path: str | None, report: Report, tag: str,
             disk_env: dict[str, str]) -> dict:
    env = {**disk_env, **({"PYTHONPATH": path} if path else {})}
    with LocalCluster(3, env=env or None) as cluster:
        cluster.wait_writable()
        leader = cluster.wait_leader()
        pid = cluster.pid(leader)
        profile = os.path.join(cluster.root, "leader.pyspy")
        spy = start_py_spy(pid, profile) if args.py_spy else None
        before, t0 = thread_cpu_s(pid), time.monotonic()
        pids = {node: cluster.pid(node) for node in cluster.ids}
        got = loads(cluster.urls, args, report, tag, pids, leader)
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
           ("life_busy", "machine_busy_cores_lifecycles", "cores"),
           ("worker_busy", "machine_busy_cores_worker", "cores"),
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
    p.add_argument("--sync-delay-us", type=int, default=0,
                   help="every node's fsync returns this much later (a slower disk)")
    add_common_flags(p)
    args = p.parse_args(argv)
    lifecycle.install_fast_loop()
    report = Report("log writer A/B: lifecycles/s and a 4-slot Worker's tasks/s",
                    "bench.log_writer", args, {"baseline": args.baseline, "rounds": args.rounds,
                                               "tasks": args.tasks,
                                               "worker_tasks": args.worker_tasks,
                                               "sync_delay_us": args.sync_delay_us},
                    data_dir=tempfile.gettempdir())
    with tempfile.TemporaryDirectory(prefix="tsched-bench-nodes-") as tmp:
        sides = {"_baseline": extract_tree(args.baseline, tmp), "": None}
        disk_env = slow_disk_env(args.sync_delay_us, tmp)
        report.start()
        results: dict[str, list[dict]] = {s: [] for s in sides}
        for rnd in range(args.rounds):
            for side, path in sides.items():
                tag = f"round {rnd + 1}, " + (f"{args.baseline} (baseline)" if side else "this code")
                results[side].append(one_side(args, path, report, tag, disk_env))
    for side, runs in results.items():
        for key, name, unit in FIGURES:
            if all(key in r for r in runs):
                report.figure(name + side, [r[key] for r in runs], unit)
    report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
