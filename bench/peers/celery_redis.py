"""The lifecycle and lateness workloads against Celery 5 + Redis, beside tsched, in one run.

Starts its own redis-server on a free loopback port and a Celery worker process, runs
  lifecycle - producers send N tasks, the worker runs and acknowledges them (acks_late,
              results stored in Redis); tasks/s from first send to last completion;
  lateness  - 1,000 ETA tasks/s over 30 s (`apply_async(eta=...)`, held in worker memory
              until due); handler start - eta;
then the same two workloads against a local tsched cluster (bench.lifecycle with the same
task count, bench.lateness with the Worker's early dispatch), and prints tsched/Celery.

Needs: `pip install -e '.[bench]'` and `apt-get install redis-server`.

    python -m bench.peers.celery_redis
    python -m bench.peers.celery_redis --skip-tsched --duration-s 10
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

try:
    import celery
    import redis
except ImportError:
    raise SystemExit("Celery and redis-py are needed: pip install -e '.[bench]'") from None

from bench import lateness, lifecycle  # noqa: E402
from bench.lib.api import install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.peers.celery_worker import CeleryWorker  # noqa: E402
from bench.peers.redis_server import RedisServer  # noqa: E402


def celery_lifecycle(r: "redis.Redis", tasks: int, producers: int, timeout_s: float) -> dict:
    """One run: send `tasks` noop tasks from `producers` threads, wait for all to finish."""
    from bench.peers.celery_app import DONE_KEY, noop
    r.delete(DONE_KEY)

    def send(indexes: range) -> None:
        # One producer (connection + channel) per thread, as a batching client would hold.
        with noop.app.producer_or_acquire() as producer:
            for i in indexes:
                noop.apply_async((i,), producer=producer)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(producers) as pool:
        list(pool.map(send, [range(p, tasks, producers) for p in range(producers)]))
    t_sent = time.perf_counter()
    deadline = t0 + timeout_s
    done = 0
    while done < tasks and time.perf_counter() < deadline:
        done = int(r.get(DONE_KEY) or 0)
        if done < tasks:
            time.sleep(0.005)  # polling the completion counter, bounded by the deadline
    t_end = time.perf_counter()
    return {"tasks_per_s": done / (t_end - t0), "submit_per_s": tasks / (t_sent - t0),
            "completed": done, "acked": tasks, "elapsed_s": t_end - t0,
            "timed_out": done < tasks}


async def celery_lateness(r: "redis.Redis", cfg: lateness.Config) -> dict:
    """ETA tasks paced like bench.lateness; each records start - eta in a Redis list."""
    from bench.peers.celery_app import LATENESS_KEY, timed
    r.delete(LATENESS_KEY)
    loop = asyncio.get_running_loop()
    sender = ThreadPoolExecutor(1)

    def send(run_ats: list[int]) -> int:
        with timed.app.producer_or_acquire() as producer:
            for ms in run_ats:
                eta = dt.datetime.fromtimestamp(ms / 1000.0, dt.timezone.utc)
                timed.apply_async((ms,), eta=eta, producer=producer)
        return len(run_ats)

    async def submit(run_ats: list[int]) -> int:
        return await loop.run_in_executor(sender, send, run_ats)

    t_begin = time.time()
    plan = lateness.schedule(cfg, (t_begin + cfg.lead_s) * 1000.0)
    acked, errors = await lateness.produce(submit, cfg, plan, t_begin)
    sender.shutdown()
    deadline = plan[-1][-1] / 1000.0 + cfg.drain_s
    while r.llen(LATENESS_KEY) < acked and time.time() < deadline:
        await asyncio.sleep(0.1)  # polling the sample count, bounded by the deadline
    samples = [float(x) for x in r.lrange(LATENESS_KEY, 0, -1)]
    return {"samples": samples, "acked": acked, "errors": errors,
            "missing": max(0, acked - len(samples))}


def run_celery(args: argparse.Namespace, report: Report, lcfg: lateness.Config) -> dict:
    out: dict = {}
    with RedisServer(args.redis_fsync) as server:
        import bench.peers.celery_app as capp
        capp.app.conf.broker_url = capp.app.conf.result_backend = server.url
        capp.REDIS_URL = server.url
        report.note(f"redis-server {server.version()} on {server.url}, appendfsync={args.redis_fsync}")
        r = redis.Redis.from_url(server.url)
        worker = CeleryWorker(server.url, args.celery_pool, args.celery_concurrency)
        worker.start(f"{server.dir}/celery-worker.log")
        try:
            worker.wait_ready()
            if "lifecycle" in args.workloads:
                celery_lifecycle(r, min(1000, args.tasks), args.producers, 120)  # warm-up
                runs = []
                for i in range(args.runs):
                    res = celery_lifecycle(r, args.tasks, args.producers, args.run_timeout_s)
                    report.note(f"celery run {i + 1}: {res['tasks_per_s']:,.0f} lifecycles/s "
                                f"({res['completed']}/{res['acked']} in {res['elapsed_s']:.2f} s; "
                                f"sends alone {res['submit_per_s']:,.0f}/s)"
                                + (" TIMED OUT" if res["timed_out"] else ""))
                    runs.append(res)
                out["lifecycle"] = report.figure("celery_lifecycles_per_s",
                                                 [x["tasks_per_s"] for x in runs], "/s")
            if "lateness" in args.workloads:
                res = asyncio.run(celery_lateness(r, lcfg))
                report.note(lateness.describe_mode("celery eta", res))
                out["lateness"] = report.distribution("celery_lateness_ms", res["samples"], "ms")
        finally:
            worker.stop()
    return out


def run_tsched(args: argparse.Namespace, report: Report, lcfg: lateness.Config) -> dict:
    out: dict = {}
    with LocalCluster(args.nodes) as cluster:
        cluster.wait_writable()
        report.note(f"tsched: {args.nodes} nodes up")
        if "lifecycle" in args.workloads:
            cfg = lifecycle.Config(tasks=args.tasks)
            runs = asyncio.run(lifecycle.measure(cluster.urls, cfg, args.runs, report))
            out["lifecycle"] = report.figure("tsched_lifecycles_per_s",
                                             [x["tasks_per_s"] for x in runs], "/s",
                                             lifecycle.TARGET)
        if "lateness" in args.workloads:
            res = asyncio.run(lateness.run_mode(cluster.urls, lcfg, "prefetch"))
            report.note(lateness.describe_mode("tsched prefetch", res))
            out["lateness"] = report.distribution("tsched_lateness_ms_prefetch", res["samples"],
                                                  "ms", lateness.TARGETS["prefetch"])
    return out


def print_ratios(report: Report, ts: dict, ce: dict) -> None:
    if "lifecycle" in ts and "lifecycle" in ce and ce["lifecycle"]:
        ratio = ts["lifecycle"] / ce["lifecycle"]
        report.figure("ratio_lifecycles_tsched_over_celery", [ratio], "x", "higher is better")
    if "lateness" in ts and "lateness" in ce:
        for q in ("p50", "p99"):
            if ce["lateness"].get(q):
                ratio = ts["lateness"][q] / ce["lateness"][q]
                report.figure(f"ratio_lateness_{q}_tsched_over_celery", [ratio], "x",
                              "<= 1 (no worse than Celery)" if q == "p99" else "lower is better")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = lateness.Config()
    p.add_argument("--workloads", default="lifecycle,lateness")
    p.add_argument("--tasks", type=int, default=10_000, help="lifecycle tasks per run")
    p.add_argument("--runs", type=int, default=3, help="lifecycle runs (median printed)")
    p.add_argument("--run-timeout-s", type=float, default=120.0)
    p.add_argument("--producers", type=int, default=2, help="Celery producer threads")
    p.add_argument("--rate", type=int, default=d.rate_per_s, help="lateness: timed tasks per second")
    p.add_argument("--duration-s", type=float, default=d.duration_s)
    p.add_argument("--lead-s", type=float, default=d.lead_s)
    p.add_argument("--celery-pool", default="prefork", choices=("prefork", "threads", "solo"))
    p.add_argument("--celery-concurrency", type=int, default=2)
    p.add_argument("--redis-fsync", default="everysec", choices=("off", "everysec", "always"),
                   help="Redis AOF policy (off: no AOF)")
    p.add_argument("--nodes", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--skip-tsched", action="store_true", help="measure Celery only (no ratios)")
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loop_name = install_fast_loop()
    lcfg = lateness.Config(rate_per_s=args.rate, duration_s=args.duration_s, lead_s=args.lead_s)
    report = Report("Celery + Redis beside tsched: lifecycles/s and ETA lateness",
                    "bench.peers.celery_redis", args,
                    {"workloads": args.workloads, "tasks": args.tasks, "runs": args.runs,
                     "celery": celery.__version__, "redis_py": redis.__version__,
                     "celery_pool": f"{args.celery_pool} x{args.celery_concurrency}",
                     "celery_acks_late": True, "celery_result_backend": "redis",
                     "redis_appendfsync": args.redis_fsync, "tsched_nodes": args.nodes,
                     "lateness": asdict(lcfg), "client_loop": loop_name},
                    data_dir=tempfile.gettempdir()).start()
    ce = run_celery(args, report, lcfg)
    ts = {} if args.skip_tsched else run_tsched(args, report, lcfg)
    print_ratios(report, ts, ce)
    report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
