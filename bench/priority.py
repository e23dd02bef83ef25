"""Priority tiers under overload: start lateness per tier at twice what the workers complete.

A 3-node cluster; worker pools (`tsched.client.Worker`, one per pool, all in one process
apart from the producer: bench/lib/tier_worker.py) whose handlers sleep `--service-ms`, so
the worker slots are the bottleneck, not the nodes. Worker capacity C = slots / service
time (20 slots x 50 ms: 400 tasks/s); the producer submits 2C tasks/s open loop (batches
every 20 ms of the tasks due by then, round robin over the nodes), due at once, for
`--duration` seconds. Submits by tier: critical (priority 0) 10 %, high (1-3) 30 %,
normal (4-6) 40 %, low (7-9) 20 % (bench/lib/tier_mix.py; each tier's priorities in turn).

Slots by pool, in DESIGN 5.1's shares: critical 20 %, high 40 %, normal 30 %, low 10 %.
Each pool's range (`Worker(priorities=...)`) by mode:
  shared   - a pool serves its tier and every more urgent one (critical 0-0, high 0-3,
             normal 0-6, low 0-9); claims take the most urgent work in range first, so
             critical work has every slot and high work 80 % of them (all but the
             critical pool's). No slot is only for low: the low pool takes normal work
             while any is waiting.
  reserved - the same, but the low pool claims only 7-9: a 10 % reservation for low.
             Those are the slots `Worker(reserve={"low": 0.1})` would set aside (they claim
             only the low range); here they are a Worker of their own with
             `priorities="low"`, which is what a reserved slot does.
  per-tier - (not in the default run) each pool only its own tier: one pool per tier, the
             other shape DESIGN 5.1 names. Measured against `shared` to show why the
             default run lets pools serve the more urgent tiers too.

Figures per mode and tier: start lateness (handler start - due time, the due time being
when the open loop meant to submit it) of the tasks due after `--warmup` seconds, p50 /
p95 / p99 / max; tasks started and completed (handler returned) during the load; the wait
at the end of the load of the oldest acknowledged task not started yet (the tasks a
lateness of started tasks does not see). Low-tier progress: low tasks completed per
minute after the warm-up, and the `--window` windows after the warm-up with no low
completion ("low never starved" in the reserved mode: 0 such windows). A tier's SLA
(critical p99 <= 1 s, high <= 5 s, normal <= 60 s, low <= 3600 s) is met when both its p99
and its oldest waiting task are within it. Each pool's busy share (handler time / slot
time) says whether a miss is the workers' capacity (near 100 %) or the cluster.

Each mode runs on a fresh cluster (the backlog one mode leaves does not slow the next).
Every range but those starting at 0 has a lower bound, and a claim by such a range walks
the pending tasks more urgent than it (DESIGN 5; `bench.range_claim_cost` measures it):
under overload that backlog grows, which is what the per-window node CPU lines show.

    python -m bench.priority                        # shared and reserved, 90 s each
    python -m bench.priority --duration 30 --modes reserved
    python -m bench.priority --modes shared,per-tier --json /tmp/prio.json
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import contention, stats  # noqa: E402
from bench.lib.api import Api, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.lib.revision import add_compiled_flag, compiled_tree, nodes_build  # noqa: E402
from bench.lib.tier_mix import (  # noqa: E402
    TIERS, pool_ranges, pool_use, priority_of, split_slots, tier_figures, tiers_by_pool,
    window_p99s)

REPO = Path(__file__).resolve().parents[1]
MODES = ("shared", "reserved", "per-tier")
BATCH_MAX = 1000          # request_items_max: tasks in one submit


@dataclass
class Config:
    duration_s: float = 90.0
    service_ms: float = 50.0
    slots: int = 20
    load_factor: float = 2.0      # offered load / worker capacity
    warmup_s: float = 10.0
    window_s: float = 10.0
    tick_s: float = 0.02

    @property
    def capacity_per_s(self) -> float:
        return self.slots / (self.service_ms / 1000.0)

    @property
    def rate_per_s(self) -> float:
        return self.load_factor * self.capacity_per_s


class PoolProcess:
    """bench.lib.tier_worker in a child process."""

    def __init__(self, urls: list[str], task_type: str, pools: str, cfg: Config) -> None:
        fd, self.out = tempfile.mkstemp(prefix="tsched-priority-", suffix=".events")
        os.close(fd)
        self.argv = [sys.executable, "-m", "bench.lib.tier_worker", "--urls", ",".join(urls),
                     "--task-type", task_type, "--pools", pools,
                     "--service-ms", str(cfg.service_ms), "--out", self.out]

    async def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
            env=env, cwd=str(REPO), start_new_session=True)
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        if line.strip() != b"ready":
            raise RuntimeError(f"worker process did not start: {line!r}")

    async def stop(self) -> tuple[dict, dict]:
        """Stops it; (starts: i -> (priority, due ms, start ms, pool), ends: i -> end ms)."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        self.log = "no log summary (stopped by SIGKILL)"
        try:
            out, _ = await asyncio.wait_for(self.proc.communicate(), 60)
            for line in out.decode().splitlines():
                if line.startswith("log "):
                    n, _, first = line[4:].partition(" ")
                    self.log = f"{n} WARNING/ERROR lines" + (f", first: {first}" if first else "")
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        if self.proc.returncode != 0:
            print(f"  !! worker process exit status {self.proc.returncode}", file=sys.stderr)
        starts, ends = {}, {}
        try:
            with open(self.out) as f:
                for line in f:
                    parts = line.split()
                    if parts[0] == "s":
                        starts[int(parts[1])] = (int(parts[2]), float(parts[3]),
                                                 float(parts[4]), parts[5])
                    elif parts[0] == "e":
                        ends[int(parts[1])] = float(parts[2])
        finally:
            os.unlink(self.out)
        return starts, ends


async def produce(api: Api, urls: list[str], task_type: str, cfg: Config, t0: float
                  ) -> tuple[dict[int, tuple[float, float]], int, list[float]]:
    """The open loop: every tick, one batch of the tasks due by then (due ms = when the
    schedule meant it). Returns (acknowledged: i -> (due ms, acknowledged ms), tasks whose
    submit failed, batch ack latencies in ms)."""
    acked: dict[int, tuple[float, float]] = {}
    acks_ms: list[float] = []
    failed = 0
    pending: set[asyncio.Task] = set()
    step_ms = 1000.0 / cfg.rate_per_s
    total = int(cfg.duration_s * cfg.rate_per_s)

    async def send(first: int, last: int, url: str) -> None:
        nonlocal failed
        dues = {i: t0 * 1000.0 + i * step_ms for i in range(first, last)}
        body = [{"task_type": task_type, "priority": priority_of(i),
                 "payload": {"i": i, "p": priority_of(i), "due_ms": due}}
                for i, due in dues.items()]
        sent = time.perf_counter()
        try:
            await api.submit(url, body, timeout_s=30, minimal=True)
        except Exception as e:   # noqa: BLE001 - counted and shown, the load goes on
            failed += len(body)
            if failed == len(body):
                print(f"  !! submit failed: {e!r}", file=sys.stderr)
            return
        acks_ms.append((time.perf_counter() - sent) * 1000.0)
        now_ms = time.time() * 1000.0
        acked.update((i, (due, now_ms)) for i, due in dues.items())

    sent, k = 0, 0
    while sent < total:
        due_now = min(total, int((time.time() - t0) * cfg.rate_per_s) + 1)
        while sent < due_now:
            last = min(due_now, sent + BATCH_MAX)
            task = asyncio.create_task(send(sent, last, urls[k % len(urls)]))
            pending.add(task)
            task.add_done_callback(pending.discard)
            sent, k = last, k + 1
        await asyncio.sleep(cfg.tick_s)   # pacing the open loop, not synchronisation
    if pending:
        await asyncio.wait(pending, timeout=60)
    return acked, failed, acks_ms


def cpu_s(pid: int) -> float:
    """CPU seconds of one process so far (0 once it is gone)."""
    st = contention._proc_stat(pid)
    return st[1] if st else 0.0


async def sample_cpu(pids: dict[str, int], t0: float, cfg: Config) -> list[dict[str, float]]:
    """CPU seconds of each process at t0 and every window after it, to the load's end."""
    out = []
    for k in range(int(cfg.duration_s // cfg.window_s) + 1):
        await asyncio.sleep(max(0.0, t0 + k * cfg.window_s - time.time()))   # sampling times
        out.append({"at": time.time(), **{name: cpu_s(pid) for name, pid in pids.items()}})
    return out


async def run_mode(cluster: LocalCluster, cfg: Config, mode: str) -> dict:
    urls = cluster.urls
    slots = split_slots(cfg.slots)
    ranges = pool_ranges(mode)
    pools = ",".join(f"{name}:{slots[name]}:{ranges[name]}" for name in slots)
    task_type = f"prio-{mode}-{uuid.uuid4().hex[:6]}"
    worker = PoolProcess(urls, task_type, pools, cfg)
    await worker.start()
    pids = {**{i: cluster.pid(i) for i in cluster.ids}, "workers": worker.proc.pid}
    try:
        async with Api() as api:
            t0 = time.time() + 0.5
            sampler = asyncio.create_task(sample_cpu(pids, t0, cfg))
            acked, failed, acks_ms = await produce(api, urls, task_type, cfg, t0)
            cpu = await sampler
        end_ms = (t0 + cfg.duration_s) * 1000.0
        if time.time() * 1000.0 < end_ms:
            await asyncio.sleep(end_ms / 1000.0 - time.time())   # the load's last tick
    finally:
        starts, ends = await worker.stop()   # on a failed run too: nothing left running
    figures = tier_figures(acked, starts, ends, t0 * 1000.0, end_ms, cfg.warmup_s, cfg.window_s)
    warm_ms = t0 * 1000.0 + cfg.warmup_s * 1000.0
    return {"mode": mode, "pools": pools, "figures": figures, "failed": failed,
            "acks_ms": acks_ms, "pool_use": pool_use(starts, ends, slots, warm_ms, end_ms),
            "by_pool": tiers_by_pool(starts, end_ms), "acked": len(acked), "cpu": cpu,
            "worker_log": worker.log,
            "window_p99": window_p99s(acked, starts, t0 * 1000.0, end_ms, cfg.window_s)}


def report_windows(report: Report, r: dict, cfg: Config) -> None:
    """One line per window of the load: where the CPU went and what lateness did."""
    cpu, low = r["cpu"], r["figures"]["low"].window_completions
    skip = int(cfg.warmup_s // cfg.window_s)     # low windows count from the warm-up's end
    rows = report.figures.setdefault(f"windows_{r['mode'].replace('-', '_')}", [])
    for k in range(len(cpu) - 1):
        span = max(cpu[k + 1]["at"] - cpu[k]["at"], 1e-3)   # the sampler may run late
        d = {name: (cpu[k + 1][name] - cpu[k][name]) / span for name in cpu[k] if name != "at"}
        nodes = {n: v for n, v in d.items() if n != "workers"}
        p99 = r["window_p99"][k] if k < len(r["window_p99"]) else {}
        aligned = cfg.warmup_s % cfg.window_s == 0     # low windows start at the warm-up's end
        lows = low[k - skip] if aligned and 0 <= k - skip < len(low) else "-"
        rows.append({"from_s": k * cfg.window_s, "cores": d, "p99_s": p99, "low_completed": lows})
        report.note(f"{r['mode']} {k * cfg.window_s:>4.0f}-{(k + 1) * cfg.window_s:.0f} s: "
                    f"nodes {sum(nodes.values()):.2f} cores (busiest {max(nodes.values()):.2f}), "
                    f"workers {d['workers']:.2f}; p99 of tasks due: " + ", ".join(
                        f"{t} {v:.2f} s" for t, v in p99.items() if t != "low")
                    + f"; low completed {lows}")


def report_mode(report: Report, r: dict, cfg: Config) -> None:
    mode, key = r["mode"], r["mode"].replace("-", "_")
    report_windows(report, r, cfg)
    report.note(f"{mode}: pools (name:slots:range) {r['pools']}; {r['acked']} submits "
                f"acknowledged, {r['failed']} failed; batch ack p99 "
                f"{stats.percentile(r['acks_ms'], 99):.1f} ms")
    report.note(f"{mode}: workers' log: {r['worker_log']}")
    report.note(f"{mode}: busy share of each pool's slots after the warm-up: " + ", ".join(
        f"{p} {u:.0%}" for p, u in r["pool_use"].items()))
    report.note(f"{mode}: tasks started by pool and tier: " + "; ".join(
        f"{p} " + " ".join(f"{t}={n}" for t, n in sorted(c.items()))
        for p, c in sorted(r["by_pool"].items())))
    for tier in TIERS:
        f = r["figures"][tier.name]
        s = report.distribution(f"start_lateness_s_{tier.name}_{key}", f.lateness_s, "s",
                                f"p99 <= {tier.sla_s:g} s")
        report.distribution(f"start_after_ack_s_{tier.name}_{key}", f.after_ack_s, "s")
        report.figure(f"started_{tier.name}_{key}", [f.started], "tasks")
        report.figure(f"completed_{tier.name}_{key}", [f.completed], "tasks")
        report.figure(f"oldest_waiting_s_{tier.name}_{key}", [f.oldest_unstarted_wait_s], "s",
                      f"<= {tier.sla_s:g} s")
        met = (f.started > 0 and s["p99"] <= tier.sla_s
               and f.oldest_unstarted_wait_s <= tier.sla_s)
        within = " (within a run shorter than the SLA)" if met and cfg.duration_s <= tier.sla_s \
            else ""
        report.note(f"{mode} {tier.name}: {f.submitted} submitted, {f.started} started, "
                    f"{f.completed} completed; SLA {tier.sla_s:g} s "
                    f"{'met' if met else 'MISSED'}{within}")
        report.figures[f"sla_met_{tier.name}_{key}"] = met
    low = r["figures"]["low"]
    minutes = len(low.window_completions) * cfg.window_s / 60.0
    report.figure(f"low_completed_per_min_{key}",
                  [sum(low.window_completions) / minutes if minutes else float("nan")], "/min")
    report.figure(f"low_windows_without_completion_{key}",
                  [sum(1 for n in low.window_completions if n == 0)],
                  f"windows of {len(low.window_completions)}",
                  "0 (low never starved)" if mode == "reserved" else None)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    d = Config()
    p.add_argument("--duration", type=float, default=d.duration_s, help="seconds of load per mode")
    p.add_argument("--service-ms", type=float, default=d.service_ms, help="each handler's sleep")
    p.add_argument("--slots", type=int, default=d.slots, help="worker slots in all pools")
    p.add_argument("--load-factor", type=float, default=d.load_factor,
                   help="offered submits/s over the workers' capacity")
    p.add_argument("--warmup", type=float, default=d.warmup_s,
                   help="seconds of load before lateness and windows count")
    p.add_argument("--window", type=float, default=d.window_s, help="low-progress window, s")
    p.add_argument("--modes", default="shared,reserved", help=f"from {', '.join(MODES)}")
    p.add_argument("--keep", action="store_true", help="keep the clusters' data and logs")
    add_compiled_flag(p)
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        raise SystemExit(f"--modes: choose from {', '.join(MODES)}")
    cfg = Config(duration_s=args.duration, service_ms=args.service_ms, slots=args.slots,
                 load_factor=args.load_factor, warmup_s=args.warmup, window_s=args.window)
    split_slots(cfg.slots)   # refuses too few slots before anything starts
    loop_name = install_fast_loop()
    with tempfile.TemporaryDirectory(prefix="tsched-bench-prio-") as tmp:
        env = {"PYTHONPATH": compiled_tree(os.path.join(tmp, "compiled"))} \
            if args.compiled else None
        report = Report("priority tiers at twice the workers' capacity", "bench.priority", args,
                        {"nodes": 3, **asdict(cfg), "capacity_per_s": cfg.capacity_per_s,
                         "offered_per_s": cfg.rate_per_s, "modes": ",".join(modes),
                         "client_loop": loop_name, "state_machine": nodes_build(args)},
                        data_dir=tmp)
        report.start()
        for mode in modes:
            root = tempfile.mkdtemp(prefix=f"tsched-bench-prio-{mode}-") if args.keep \
                else os.path.join(tmp, mode)
            os.makedirs(root, exist_ok=True)
            with LocalCluster(3, keep=args.keep, root=root, env=env) as cluster:
                cluster.wait_writable()
                report_mode(report, asyncio.run(run_mode(cluster, cfg, mode)), cfg)
        report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
