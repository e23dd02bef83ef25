"""A worker process for the lateness benchmark (`python -m bench.lib.timed_worker ...`).

It runs `tsched.client.Worker` instances whose handler records, first thing, how late it
started: wall clock now - the task's intended run_at (carried in the payload as
`run_at_ms`). Running in its own process keeps the producer's work off the worker's
event loop, as in a real deployment (and as Celery's worker runs apart from its producer).

Samples (ms, one per line) are appended to `--out` every 100 ms, so a worker killed at the
end still leaves what it measured. On stdout, one line each: `ready`, then `count N` as
samples arrive, and `done` after SIGTERM once the Workers have stopped.
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

from bench.lib.revision import add_worker_process_flags, run_worker_process, worker_class

PROGRESS_PERIOD_S = 0.1


async def _main(args: argparse.Namespace) -> None:
    samples: list[float] = []

    async def handler(payload: dict, ctx: object) -> None:
        samples.append(time.time() * 1000.0 - payload["run_at_ms"])

    Worker = worker_class(args.client_dir)
    extra = {"carry_completions": False} if args.no_carry else {}
    workers = [Worker(args.urls, {args.task_type: handler}, concurrency=args.concurrency,
                      lease_s=args.lease_s, prefetch_ms=args.prefetch_ms,
                      worker_id=f"lateness-{i}", wait_s=args.wait_s, grace_s=5.0, **extra)
               for i in range(args.workers)]
    await run_until_sigterm(workers, lambda written, out: _flush(samples, written, out),
                            args.out)


async def run_until_sigterm(workers: list, flush, out_path: str,
                            period_s: float = PROGRESS_PERIOD_S) -> None:
    """Runs the Workers until SIGTERM, calling `flush(written, out)` every `period_s` (it
    appends what is new to `out` and returns the new count), and once more after the
    Workers stopped. Prints `ready` once they run and `done` at the end."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    runs = [asyncio.create_task(w.run_async()) for w in workers]
    # Worker.run_async installs its own SIGTERM handler (last one wins): take it back.
    await asyncio.sleep(0)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    written = 0
    with open(out_path, "a") as out:
        while not stop.is_set():
            written = flush(written, out)
            try:
                await asyncio.wait_for(stop.wait(), period_s)
            except asyncio.TimeoutError:
                pass
        for w in workers:
            w.stop()
        await asyncio.gather(*runs, return_exceptions=True)
        flush(written, out)
    print("done", flush=True)

def _flush(samples: list[float], written: int, out) -> int:
    """Appends the samples not yet written; reports the count. Returns the new count."""
    if len(samples) == written:
        return written
    n = len(samples)
    out.write("".join(f"{s:.3f}\n" for s in samples[written:n]))
    out.flush()
    print(f"count {n}", flush=True)
    return n


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--urls", required=True, help="comma-separated node URLs")
    p.add_argument("--task-type", required=True)
    p.add_argument("--out", required=True, help="file the samples are appended to (ms, one per line)")
    p.add_argument("--prefetch-ms", type=int, default=250)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--lease-s", type=float, default=30)
    p.add_argument("--wait-s", type=float, default=20)
    p.add_argument("--no-carry", action="store_true", help="completions never ride on claims")
    add_worker_process_flags(p)
    return run_worker_process(_main, p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
