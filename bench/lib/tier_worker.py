"""The worker pools of the priority benchmark (`python -m bench.lib.tier_worker ...`).

One `tsched.client.Worker` per pool, all in this process, each with its own slots
(`concurrency`) and priority range (`priorities=`). The handler (async) records when it
started and sleeps the service time: the worker's slots, not the nodes, are what runs out.

    --pools critical:4:0-0,high:8:0-3,normal:6:0-6,low:2:7-9   (name:slots:range, ...)

Events are appended to `--out` every 100 ms, one per line, so a worker stopped at the end
still leaves what it measured:
    s I PRIORITY DUE_MS START_MS POOL   a handler started (wall clock ms)
    e I END_MS                          that handler returned
On stdout: `ready`, then `done` after SIGTERM once the Workers have stopped, and a
`log N FIRST` line: the Workers' WARNING and ERROR lines are counted, not printed (a
cluster that falls behind makes thousands), and the first few are shown.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time

from bench.lib.revision import add_worker_process_flags, run_worker_process, worker_class
from bench.lib.timed_worker import run_until_sigterm

FLUSH_PERIOD_S = 0.1
LOG_SHOWN = 3


class CountingHandler(logging.Handler):
    """Counts the log records it gets and keeps the first few."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count, self.first = 0, []

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if len(self.first) < LOG_SHOWN:
            self.first.append(record.getMessage()[:200])


def parse_pools(spec: str) -> list[tuple[str, int, str]]:
    """`name:slots:range,...` -> [(name, slots, range)]; range as `Worker(priorities=)`."""
    pools = []
    for item in spec.split(","):
        name, slots, rng = item.split(":")
        pools.append((name, int(slots), rng))
    return pools


async def _main(args: argparse.Namespace) -> None:
    events: list[str] = []
    counted = CountingHandler()
    logging.getLogger().addHandler(counted)
    service_s = args.service_ms / 1000.0

    def handler_for(pool: str):
        async def handler(payload: dict, ctx: object) -> None:
            now_ms = time.time() * 1000.0
            events.append(f"s {payload['i']} {payload['p']} {payload['due_ms']:.1f} "
                          f"{now_ms:.1f} {pool}\n")
            await asyncio.sleep(service_s)
            events.append(f"e {payload['i']} {time.time() * 1000.0:.1f}\n")
        return handler

    Worker = worker_class(args.client_dir)
    workers = [Worker(args.urls, {args.task_type: handler_for(name)}, concurrency=slots,
                      priorities=rng, worker_id=f"prio-{name}", grace_s=5.0,
                      lease_s=args.lease_s)
               for name, slots, rng in parse_pools(args.pools)]
    await run_until_sigterm(workers, lambda written, out: _flush(events, written, out),
                            args.out, FLUSH_PERIOD_S)
    print(f"log {counted.count} {' | '.join(counted.first)}", flush=True)


def _flush(events: list[str], written: int, out) -> int:
    n = len(events)
    if n > written:
        out.write("".join(events[written:n]))
        out.flush()
    return n


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--urls", required=True, help="comma-separated node URLs")
    p.add_argument("--task-type", required=True)
    p.add_argument("--pools", required=True, help="name:slots:range,... (see the docstring)")
    p.add_argument("--service-ms", type=float, required=True, help="each handler's sleep")
    p.add_argument("--out", required=True, help="file the events are appended to")
    p.add_argument("--lease-s", type=float, default=30)
    add_worker_process_flags(p)
    return run_worker_process(_main, p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
