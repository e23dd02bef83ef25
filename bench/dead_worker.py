"""A worker SIGKILLed mid-backlog: how long until its tasks are done by the other one.

Issue 48's scenario: two Worker processes of 4 slots, started together on a backlog of
10,000 no-op tasks submitted first, drain it; worker A gets SIGKILL once the two have
started 30% of them (A holds tasks it claimed ahead,
leased to it). Without worker sessions the last of those waited for their lease (30 s)
to run out; with them the leader hears nothing from A for its session timeout (the
Worker's default, 3 s), gives A's tasks back at once through the log, and B runs them.

Per run (a fresh task type and tenant on one cluster), from the cluster's own times
(`completed_at`, the attempts' `ended_at`, on this machine's clock like the kill's):

- `done_after_kill_s`: the last task's completion - the kill;
- `given_back_after_kill_s`: when A's tasks were given back - the kill;
- `given_back`: A's attempts ended by its session's expiry; `released`: those its claims in
  flight at the kill took (their connection closed before the claim committed: the leader
  released them at once, as before sessions); `lease_expired`: those that waited for
  their lease (0 with sessions);
- `ran_twice`: tasks whose handler started twice (both logs); each must be one A had
  started but not reported (`ran_twice_not_of_A` counts any other: it must be 0).

    python -m bench.dead_worker                       # 10 runs of 10,000 tasks
    python -m bench.dead_worker --runs 3 --tasks 2000
    python -m bench.dead_worker --session-timeout-s 0 --runs 1   # without sessions
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.api import Api  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402

TARGET_S = 5.0
SUBMIT_BATCH = 1_000
POLL_S = 0.01          # the kill point and the end are polled (a run lasts seconds)
KILLED, SURVIVOR = "A", "B"


def epoch_s(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def start_worker(cluster: LocalCluster, name: str, task_type: str, log: Path,
                 args: argparse.Namespace, go: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.lib.session_worker", "--urls", ",".join(cluster.urls),
         "--task-type", task_type, "--log", str(log), "--worker-id", f"{name}-{task_type}",
         "--concurrency", str(args.concurrency), "--lease-s", str(args.lease_s),
         "--session-timeout-s", str(args.session_timeout_s), "--go", str(go)],
        stdout=subprocess.PIPE, start_new_session=True, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


async def submit_all(api: Api, base: str, task_type: str, tenant: str, n: int) -> None:
    for i in range(0, n, SUBMIT_BATCH):
        batch = [{"task_type": task_type, "tenant": tenant, "payload": j}
                 for j in range(i, min(n, i + SUBMIT_BATCH))]
        await api.submit(base, batch)


async def all_tasks(api: Api, base: str, tenant: str) -> list[dict]:
    return await api.all_tasks(base, f"tenant={tenant}&limit=1000")


async def until_done(api: Api, base: str, tenant: str, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        stats = await api.call("GET", base + f"/v1/stats?tenant={tenant}", timeout_s=30)
        live = stats["by_state"]
        if live.get("pending", 1) == 0 and live.get("running", 1) == 0:
            return
        await asyncio.sleep(POLL_S * 10)
    raise RuntimeError(f"tenant {tenant}: not done within {deadline_s} s")


async def one_run(cluster: LocalCluster, api: Api, args: argparse.Namespace,
                  tmp: Path) -> dict:
    task_type = f"dead-{uuid.uuid4().hex[:6]}"
    tenant = f"t{task_type}"
    base = cluster.url(cluster.wait_leader())
    await submit_all(api, base, task_type, tenant, args.tasks)   # the whole backlog first
    logs = {w: tmp / f"{task_type}-{w}.log" for w in (KILLED, SURVIVOR)}
    go = tmp / f"{task_type}.go"
    procs = {w: start_worker(cluster, w, task_type, logs[w], args, go) for w in logs}
    try:
        go.touch()   # both workers start together
        kill_at = int(args.tasks * args.kill_at)
        while sum(len(lines(p)) for p in logs.values()) < kill_at:
            await asyncio.sleep(POLL_S)
        os.killpg(procs[KILLED].pid, signal.SIGKILL)
        killed = time.time()
        procs[KILLED].wait(10)
        await until_done(api, base, tenant, args.lease_s + 60)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)
    return figures(await all_tasks(api, base, tenant), logs, killed, f"{KILLED}-{task_type}")


def figures(tasks: list[dict], logs: dict[str, Path], killed: float, dead_id: str) -> dict:
    ran = {w: lines(p) for w, p in logs.items()}
    starts: dict[str, int] = {}
    for ids in ran.values():
        for i in ids:
            starts[i] = starts.get(i, 0) + 1
    twice = {i for i, n in starts.items() if n > 1}
    cut = [a for t in tasks for a in t["attempts"] if a["worker_id"] == dead_id
           and a["outcome"] != "completed"]
    unreported = {t["task_id"] for t in tasks for a in t["attempts"]
                  if a["worker_id"] == dead_id and a["outcome"] != "completed"} & set(ran[KILLED])
    ends = [epoch_s(a["ended_at"]) for a in cut if a.get("ended_at")
            and a.get("error") == "worker session expired"]
    return {
        "tasks": len(tasks), "completed": sum(t["state"] == "completed" for t in tasks),
        "done_after_kill_s": max(epoch_s(t["completed_at"]) for t in tasks) - killed,
        "given_back_after_kill_s": (max(ends) - killed) if ends else float("nan"),
        "given_back": sum(a.get("error") == "worker session expired" for a in cut),
        "released": sum(a["outcome"] == "released" for a in cut),
        "lease_expired": sum(a["outcome"] == "lease_expired"
                             and a.get("error") != "worker session expired" for a in cut),
        "started_by_A": len(ran[KILLED]), "ran_twice": len(twice),
        "ran_twice_not_of_A": len(twice - unreported),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--tasks", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--kill-at", type=float, default=0.3, help="share of tasks started")
    p.add_argument("--lease-s", type=float, default=30.0)
    p.add_argument("--session-timeout-s", type=float, default=3.0,
                   help="the workers' session timeout; 0: no session (leases only)")
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    add_common_flags(p)
    return p.parse_args(argv)


async def measure(cluster: LocalCluster, args: argparse.Namespace, report: Report) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        async with Api() as api:
            for k in range(args.runs):
                run = await one_run(cluster, api, args, Path(tmp))
                report.note(f"run {k + 1}: " + ", ".join(
                    f"{key}={value:.2f}" if isinstance(value, float) else f"{key}={value}"
                    for key, value in run.items()))
                out.append(run)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with LocalCluster(3, keep=args.keep) as cluster:
        report = Report("a worker SIGKILLed mid-backlog: its tasks done by the other",
                        "bench.dead_worker", args,
                        {"nodes": 3, "tasks": args.tasks, "workers": 2,
                         "concurrency": args.concurrency, "kill_at": args.kill_at,
                         "lease_s": args.lease_s,
                         "session_timeout_s": args.session_timeout_s or "none"},
                        data_dir=cluster.root)
        cluster.wait_writable()
        report.start()
        runs = asyncio.run(measure(cluster, args, report))
        report.figure("dead_worker_done_after_kill_s", [r["done_after_kill_s"] for r in runs],
                      "s", f"<= {TARGET_S:g} s in every run")
        expired = [r for r in runs if r["given_back"]]   # the kill left tasks leased to A
        report.figure("dead_worker_runs_with_tasks_given_back", [len(expired)], "")
        if expired:
            report.figure("dead_worker_given_back_after_kill_s",
                          [r["given_back_after_kill_s"] for r in expired], "s",
                          "about the session timeout, 3 s")
        report.figure("dead_worker_runs_within_target",
                      [sum(r["done_after_kill_s"] <= TARGET_S for r in runs)], "",
                      f"{len(runs)} of {len(runs)}")
        report.figure("dead_worker_ran_twice", [r["ran_twice"] for r in runs], "",
                      "only tasks A started and did not report")
        report.figure("dead_worker_ran_twice_not_of_A", [r["ran_twice_not_of_A"] for r in runs],
                      "", "0")
        report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
