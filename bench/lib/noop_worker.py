"""One Worker process draining a backlog with a no-op handler (`bench/worker.py` runs it).

    python -m bench.lib.noop_worker --urls URL,URL --task-type T --count N --concurrency 4
        [--client-dir DIR]   # import `client` (another revision's client/) from DIR instead

It prints `ready`, then, once N handlers ran and every outcome was acknowledged by the
cluster (`Worker.running` back to 0), `done SECONDS RAN CPU_SECONDS` (wall time from the
Worker's start, handlers run, this process's CPU time meanwhile), and stops.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time

from bench.lib.revision import add_worker_process_flags, run_worker_process, worker_class

POLL_S = 0.002   # how often the end condition is checked (a run lasts seconds)


async def _main(args: argparse.Namespace) -> None:
    ran = 0

    def handler(payload, ctx):
        nonlocal ran
        ran += 1

    async def ahandler(payload, ctx):
        nonlocal ran
        ran += 1

    Worker = worker_class(args.client_dir)
    extra = {"carry_completions": False} if args.no_carry else {}
    worker = Worker(args.urls, {args.task_type: ahandler if args.handler == "async" else handler},
                    concurrency=args.concurrency, wait_s=1.0, grace_s=5.0, **extra)
    print("ready", flush=True)
    started, cpu0 = time.perf_counter(), time.process_time()
    run = asyncio.create_task(worker.run_async())
    while not (ran >= args.count and worker.running == 0) and not run.done():
        await asyncio.sleep(POLL_S)   # polling the end condition; not synchronisation
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu0
    worker.stop()
    await asyncio.gather(run, return_exceptions=True)
    print(f"done {elapsed:.6f} {ran} {cpu:.6f}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--urls", required=True)
    p.add_argument("--task-type", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--handler", choices=("sync", "async"), default="sync")
    p.add_argument("--no-carry", action="store_true", help="completions never ride on claims")
    add_worker_process_flags(p)
    return run_worker_process(_main, p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
