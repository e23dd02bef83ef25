"""Workflows (DESIGN.md section 5.2): a fan-out of N steps and one callback after all of
them, against N plain tasks, on real nodes.

Each run submits one workflow (`POST /v1/workflows`: N steps and a callback that depends
on every one of them, one request, one Raft entry); workers long-poll claims of the steps
on every node and complete what they get in one `POST /v1/completions`; one waiter
long-polls a claim of the callback from the start. Figures:

- `callback_claim_after_last_parent_ms`: from the answer to the completion that finished
  the last step to the callback's claim answer (the callback's task is created in the
  apply of that completion, and the waiting claim is woken by it: no polling). It may be
  negative: the claim's answer can arrive before the completion's.
- `workflow_lifecycles_per_s`: (N + 1) / (last step completed - submit sent), against
  `plain_lifecycles_per_s` for N plain tasks submitted in batches of 500 and run alike.

    python -m bench.workflows                  # 3 nodes, 3 runs of 10,000 steps
    python -m bench.workflows --steps 2000 --runs 1
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.api import Api, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402

SUBMIT_BATCH = 500       # plain tasks per submit request
CLAIM_MAX = 100
WORKERS = 8
WAIT_S = 1.0


class Progress:
    def __init__(self, n: int) -> None:
        self.n, self.done, self.t_last = n, 0, 0.0
        self.finished = asyncio.Event()

    def add(self, k: int) -> None:
        self.done += k
        if self.done >= self.n and not self.finished.is_set():
            self.t_last = time.perf_counter()
            self.finished.set()


async def _worker(api: Api, base: str, wid: str, task_type: str, p: Progress) -> None:
    while not p.finished.is_set():
        tasks = await api.claim(base, wid, [task_type], CLAIM_MAX, WAIT_S, minimal=True)
        if tasks:
            answers = await api.complete_many(base, tasks, {"ok": 1}, minimal=True)
            p.add(sum(1 for a in answers if "error" not in a))


async def _run_workers(api: Api, urls: list[str], task_type: str, p: Progress) -> None:
    await asyncio.gather(*(_worker(api, urls[i % len(urls)], f"w{i}", task_type, p)
                           for i in range(WORKERS)))


async def workflow_run(api: Api, urls: list[str], n: int) -> dict:
    tag = uuid.uuid4().hex[:8]
    item, cb = f"wfb_item_{tag}", f"wfb_cb_{tag}"
    steps = [{"name": f"s{i}", "task_type": item} for i in range(n)]
    steps.append({"name": "cb", "task_type": cb, "deps": [s["name"] for s in steps]})
    p = Progress(n)
    waiter = asyncio.ensure_future(_callback_claim(api, urls[0], cb))
    t0 = time.perf_counter()
    await api.call("POST", urls[1 % len(urls)] + "/v1/workflows", {"steps": steps},
                   timeout_s=120)
    await _run_workers(api, urls, item, p)
    t_cb = await waiter
    return {"latency_ms": (t_cb - p.t_last) * 1000, "per_s": (n + 1) / (p.t_last - t0)}


async def _callback_claim(api: Api, base: str, task_type: str) -> float:
    while True:
        tasks = await api.claim(base, "cb-waiter", [task_type], 1, 30.0, minimal=True)
        if tasks:
            t = time.perf_counter()
            await api.complete_many(base, tasks, None, minimal=True)
            return t


async def plain_run(api: Api, urls: list[str], n: int) -> dict:
    task_type = f"plain_{uuid.uuid4().hex[:8]}"
    p = Progress(n)
    t0 = time.perf_counter()
    workers = asyncio.ensure_future(_run_workers(api, urls, task_type, p))
    for i in range(0, n, SUBMIT_BATCH):
        batch = [{"task_type": task_type} for _ in range(min(SUBMIT_BATCH, n - i))]
        await api.submit(urls[(i // SUBMIT_BATCH) % len(urls)], batch, 60, minimal=True)
    await workers
    return {"per_s": n / (p.t_last - t0)}


async def measure(urls: list[str], n: int, runs: int, report: Report) -> list[dict]:
    out = []
    async with Api(timeout_s=120) as api:
        for r in range(runs):
            wf = await workflow_run(api, urls, n)
            plain = await plain_run(api, urls, n)
            report.note(f"run {r + 1}: callback {wf['latency_ms']:.1f} ms after the last "
                        f"parent, {wf['per_s']:,.0f} vs {plain['per_s']:,.0f} lifecycles/s")
            out.append({**wf, "plain_per_s": plain["per_s"]})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    add_common_flags(parser)
    args = parser.parse_args()
    loop_name = install_fast_loop()
    report = Report("workflows: a fan-out and its callback", "bench.workflows", args,
                    {"nodes": args.nodes, "steps": args.steps, "runs": args.runs,
                     "workers": WORKERS, "client_loop": loop_name},
                    data_dir=tempfile.gettempdir())
    report.start()
    with LocalCluster(args.nodes, keep=args.keep) as cluster:
        cluster.wait_writable()
        got = asyncio.run(measure(cluster.urls, args.steps, args.runs, report))
    report.figure("callback_claim_after_last_parent_ms", [g["latency_ms"] for g in got], "ms")
    report.figure("workflow_lifecycles_per_s", [g["per_s"] for g in got], "/s")
    report.figure("plain_lifecycles_per_s", [g["plain_per_s"] for g in got], "/s")
    report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
