"""Raft figures (printed, never asserted; no tests here). Run:

    .venv/bin/python tests/integration/test_raft_bench.py latency  [--n 300]
    .venv/bin/python tests/integration/test_raft_bench.py throughput [--seconds 10 --clients 256 --batch 1]
    .venv/bin/python tests/integration/test_raft_bench.py snapshot [--tasks 1000000]

latency/throughput: 3 replicas with the production RaftOptions (fsync on); the leader runs
in this process with the Proposer, the two followers in their own processes. The state
machine is the real one (SubmitTask commands).
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.harness.waits import wait_until  # noqa: E402
from tests.integration.raft_support import cluster_spec  # noqa: E402
from tsched.node.raft.proposer import Proposer  # noqa: E402
from tsched.node.raft.options import RaftOptions  # noqa: E402
from tsched.node.raft.replica import Replica  # noqa: E402
from tsched.statemachine import StateMachine, commands  # noqa: E402

# The child replica: raft_support.py run as a module from the repository root.
SUPPORT = ("-m", "tests.integration.raft_support")
ROOT = Path(__file__).resolve().parents[2]
PASSIVE = dataclasses.replace(RaftOptions(), raft_min_timeout_s=60.0, raft_max_timeout_s=61.0)


def submit(n: int) -> commands.SubmitTask:
    return commands.SubmitTask(request_id=f"b-{n}", now_ms=time.time_ns() // 1_000_000,
                               task_id=f"task-{n:09d}", tenant="bench", task_type="noop",
                               payload_json='{"n": %d}' % n)


class BenchCluster:
    def __init__(self, root: Path):
        self.specs = cluster_spec(root)
        self.children: list[subprocess.Popen] = []
        self.leader: Replica | None = None

    def __enter__(self):
        for spec in self.specs[1:]:
            cfg = Path(spec["data_dir"] + ".json")
            Path(spec["data_dir"]).parent.mkdir(parents=True, exist_ok=True)
            cfg.write_text(json.dumps({"spec": spec, "status_path": spec["data_dir"] + ".status",
                                       "options": dataclasses.asdict(PASSIVE), "kit": "real"}))
            self.children.append(subprocess.Popen([sys.executable, *SUPPORT, str(cfg)], cwd=ROOT,
                                                  stdout=subprocess.DEVNULL))
        s = self.specs[0]
        self.leader = Replica(self_id=s["id"], self_raft=s["raft"], peers=s["peers"],
                              data_dir=Path(s["data_dir"]))
        self.leader.start()
        wait_until(self.leader.is_ready_leader, 30, "the in-process replica to lead")
        return self

    def __exit__(self, *exc):
        self.leader.stop()
        for c in self.children:
            c.kill()
            c.wait()


async def latency(n: int) -> None:
    with tempfile.TemporaryDirectory() as root, BenchCluster(Path(root)) as bc:
        proposer = Proposer(bc.leader, asyncio.get_running_loop())
        for i in range(20):                                   # warm up
            await proposer.propose([submit(10_000_000 + i)], 10)
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            (res,), _ = await proposer.propose([submit(i)], 10)
            samples.append((time.perf_counter() - t0) * 1000)
            assert res.ok, res
        q = statistics.quantiles(samples, n=100)
        print(f"single propose on the leader, 3 replicas, fsync on, n={n}: "
              f"p50={q[49]:.2f} ms p99={q[98]:.2f} ms max={max(samples):.2f} ms")


async def throughput(seconds: float, clients: int, batch: int) -> None:
    with tempfile.TemporaryDirectory() as root, BenchCluster(Path(root)) as bc:
        proposer = Proposer(bc.leader, asyncio.get_running_loop())
        counter = iter(range(10**9))
        done = 0
        end = time.perf_counter() + seconds

        async def client():
            nonlocal done
            while time.perf_counter() < end:
                results, _ = await proposer.propose([submit(next(counter)) for _ in range(batch)], 10)
                done += len(results)

        t0 = time.perf_counter()
        entries0 = proposer.entries_proposed
        await asyncio.gather(*(client() for _ in range(clients)))
        took = time.perf_counter() - t0
        entries = proposer.entries_proposed - entries0
        print(f"batched proposals, {clients} concurrent clients x {batch} commands per call, "
              f"{took:.1f} s: "
              f"{done / took:,.0f} commands/s in {entries / took:,.0f} Raft entries/s "
              f"({done / max(entries, 1):.0f} commands per entry)")


def snapshot(tasks: int) -> None:
    import resource
    sm = StateMachine()
    t0 = time.perf_counter()
    batch = 5000
    for start in range(0, tasks, batch):
        sm.apply_batch([submit(i) for i in range(start, min(tasks, start + batch))])
    print(f"built {tasks:,} pending tasks in {time.perf_counter() - t0:.1f} s; "
          f"RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    with tempfile.TemporaryDirectory() as root:
        r = Replica(self_id="n1", self_raft="127.0.0.1:1", peers={}, data_dir=Path(root))
        r._sm = sm
        r.data_dir.mkdir(parents=True, exist_ok=True)
        stalls = []
        for _ in range(3):
            r._serialize("unused", ((b"x", 10, 1), (b"y", 9, 1), set()))
            stalls.append(r.snapshot_stalls_ms[-1])
            t1 = time.perf_counter()
            while r._check_serializing() == 1:           # SERIALIZING
                time.sleep(0.01)
            child_s = time.perf_counter() - t1
        size = r.snapshot_path.stat().st_size
        t2 = time.perf_counter()
        sm.snapshot()
        inline_ms = (time.perf_counter() - t2) * 1000
        print(f"snapshot of {tasks:,} tasks: Raft-thread stall (fork) "
              f"{', '.join(f'{s:.1f}' for s in stalls)} ms; written by the child in "
              f"{child_s:.1f} s ({size / 2**20:.0f} MiB); an inline snapshot() would stall "
              f"{inline_ms:.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["latency", "throughput", "snapshot"])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tasks", type=int, default=1_000_000)
    a = ap.parse_args()
    print(f"# {platform.node()} {platform.processor() or platform.machine()} "
          f"cpus={os.cpu_count()} python={platform.python_version()}")
    if a.what == "latency":
        asyncio.run(latency(a.n))
    elif a.what == "throughput":
        asyncio.run(throughput(a.seconds, a.clients, a.batch))
    else:
        snapshot(a.tasks)


if __name__ == "__main__":
    main()
