"""CPU the Python client spends per request: `AsyncClient.get` and `Client.get` of one task,
sequentially, against a 1-node cluster on loopback.

Prints (asserts nothing) microseconds of this process's CPU time per request (the node's
work is in another process and not counted), and wall time per request.

    .venv/bin/python -m bench.client_cpu [--requests 2000] [--runs 3]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from bench.lib.cluster import LocalCluster
from bench.lib.machine import describe
from tsched.client import AsyncClient, Client


async def async_run(url: str, n: int) -> tuple[float, float]:
    client = AsyncClient([url])
    try:
        task_id = (await client.submit("bench-client"))["task_id"]
        for _ in range(100):       # warm the connection pool and the code paths
            await client.get(task_id)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(n):
            await client.get(task_id)
        return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6
    finally:
        await client.aclose()


def sync_run(url: str, n: int) -> tuple[float, float]:
    with Client([url]) as client:
        task_id = client.submit("bench-client")["task_id"]
        for _ in range(100):
            client.get(task_id)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(n):
            client.get(task_id)
        return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    print("== client CPU per request")
    print(f"command : python -m bench.client_cpu --requests {args.requests} --runs {args.runs}")
    print("machine : " + ", ".join(f"{k}={v}" for k, v in describe().items()))
    with LocalCluster(1) as cluster:
        cluster.wait_writable()
        url = cluster.urls[0]
        for name, run in (("async", lambda: asyncio.run(async_run(url, args.requests))),
                          ("sync", lambda: sync_run(url, args.requests))):
            runs = [run() for _ in range(args.runs)]
            cpu = statistics.median(r[0] for r in runs)
            wall = statistics.median(r[1] for r in runs)
            print(f"FIGURE client_cpu_us_per_request_{name}: {cpu:.0f} us median of {args.runs} "
                  f"runs [{', '.join(f'{r[0]:.0f}' for r in runs)}]; wall {wall:.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
