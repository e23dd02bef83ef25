"""Task lifecycles per second: batched submit + claim + batched complete on real nodes.

Producers submit N tasks in batches (`POST /v1/tasks` with `{"tasks": [...]}`) round-robin
over the nodes; workers long-poll claims (`max_tasks` large) on every node and complete
what they get in one `POST /v1/completions`. Submits, claims and completions ask for
minimal answers (`Prefer: return=minimal`: a report or submit answered by the task's id and
state, a claimed task with what a worker needs to run it), as the product's Worker does;
`--full-answers` asks for whole tasks instead. The figure is N / (last
completion - first submit). Each run uses its own task type, so runs do not see each
other's tasks.

With `--carry` every run is followed by one whose workers claim as the product's Worker
does under a backlog: while a claim comes back full, the next claim carries the previous
batch's completions (`POST /v1/claims` with `completions`, one round trip and mostly one
Raft entry), waiting at most 0.2 s; otherwise they are sent apart. Both figures print.
With `--baseline REV` the nodes of that revision (its node/, statemachine/ and client/,
taken with `git archive`) run the same runs on a cluster of their own, alternating with
this code's cluster round by round: an A/B of node code in one run.

    python -m bench.lifecycle                # 3 nodes, 3 runs of 20,000 tasks
    python -m bench.lifecycle --nodes 5 --tasks 50000
    python -m bench.lifecycle --carry --baseline main --rounds 3 --runs 1
    python -m bench.lifecycle --compiled --baseline main --baseline-compiled --rounds 3 --runs 1
        # both sides on the compiled build; without --baseline-compiled the baseline is Python
"""
from __future__ import annotations

import argparse
import asyncio
import operator
import os
import re
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, replace
from typing import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib import contention  # noqa: E402
from bench.lib.api import Api, HttpError, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.lib.revision import add_compiled_flag, compiled_tree, extract_tree, nodes_build  # noqa: E402

TARGET = ">= 10,000 /s (3 nodes)"


@dataclass
class Config:
    tasks: int = 20_000
    producers: int = 4
    batch: int = 500
    workers: int = 8
    claim_max: int = 100
    wait_s: float = 1.0
    run_timeout_s: float = 120.0
    tenants: tuple[str, ...] = ()    # task i goes to tenants[i % n]; none: the default tenant
    tenant_batches: bool = False     # with tenants: each submit batch is one tenant's (in turn)
    carry: bool = False              # completions ride on the next claim while claims are full
    carry_wait_s: float = 0.2        # a claim that carries completions waits no longer (Worker's)
    minimal: bool = True             # submits, claims and reports answered minimally


class Run:
    """The shared counters of one lifecycle run."""

    def __init__(self, cfg: Config, task_type: str) -> None:
        self.cfg, self.task_type = cfg, task_type
        self.acked = self.completed = self.submit_errors = self.complete_errors = 0
        self.producers_left = cfg.producers
        self.batches = 0                     # submit batches made (tenant_batches: whose turn)
        self.by_prefix: dict[str, int] = {}  # completions by the id's first two hex digits
        self.t_first = self.t_submitted = self.t_last = 0.0
        self.finished = asyncio.Event()

    def check_done(self) -> None:
        if self.producers_left == 0 and self.completed >= self.acked:
            self.finished.set()


async def _producer(api: Api, base: str, run: Run, indexes: range) -> None:
    cfg = run.cfg
    try:
        for start in range(0, len(indexes), cfg.batch):
            chunk = indexes[start:start + cfg.batch]
            tasks = [{"task_type": run.task_type, "payload": {"i": i}} for i in chunk]
            if cfg.tenants and cfg.tenant_batches:    # a producer per team, as it were
                tenant = cfg.tenants[run.batches % len(cfg.tenants)]
                run.batches += 1
                for t in tasks:
                    t["tenant"] = tenant
            elif cfg.tenants:
                for t in tasks:
                    t["tenant"] = cfg.tenants[t["payload"]["i"] % len(cfg.tenants)]
            try:
                created = await api.submit(base, tasks, minimal=cfg.minimal)
                run.acked += len(created)  # not `+= await ...`: that reads acked before awaiting
            except (HttpError, OSError, asyncio.TimeoutError) as e:
                run.submit_errors += 1
                print(f"  !! submit batch failed: {e}", file=sys.stderr)
    finally:
        run.producers_left -= 1
        if run.producers_left == 0:
            run.t_submitted = time.perf_counter()
        run.check_done()


async def _worker(api: Api, base: str, run: Run, worker_id: str) -> None:
    cfg = run.cfg
    carried: list[dict] = []     # claimed, handled, their completions not yet sent
    while not run.finished.is_set():
        try:
            if carried:
                tasks, results = await api.claim_and_complete(
                    base, worker_id, [run.task_type], cfg.claim_max, cfg.carry_wait_s,
                    carried, result={}, minimal=cfg.minimal)
                _count_done(run, results)
            else:
                tasks = await api.claim(base, worker_id, [run.task_type], cfg.claim_max,
                                        cfg.wait_s, minimal=cfg.minimal)
            carried = []
            if not tasks:
                continue
            if cfg.carry and len(tasks) == cfg.claim_max:
                carried = tasks       # a backlog: they ride on the next claim
            else:
                _count_done(run, await api.complete_many(base, tasks, result={},
                                                         minimal=cfg.minimal))
        except (HttpError, OSError, asyncio.TimeoutError) as e:
            run.complete_errors += 1
            print(f"  !! claim/complete failed: {e}", file=sys.stderr)
            await asyncio.sleep(0.05)  # back off from a failing node; not a synchronisation
            continue


def _count_done(run: Run, results: list) -> None:
    done = [r for r in results if isinstance(r, dict) and "error" not in r]
    run.completed += len(done)
    if run.cfg.tenants:
        for r in done:   # with shards, the id's first two hex digits are its shard
            head = r["task_id"][:2]
            run.by_prefix[head] = run.by_prefix.get(head, 0) + 1
    run.t_last = time.perf_counter()
    run.check_done()


async def run_once(api: Api, urls: list[str], cfg: Config, label: str = "life") -> dict:
    """One run; returns {"tasks_per_s", "submit_per_s", "completed", "errors", ...}."""
    run = Run(cfg, f"{label}-{uuid.uuid4().hex[:8]}")
    workers = [asyncio.create_task(_worker(api, urls[w % len(urls)], run, f"bench-w{w}"))
               for w in range(cfg.workers)]
    await asyncio.sleep(0)  # let the workers send their first claims
    run.t_first = time.perf_counter()
    producers = [asyncio.create_task(_producer(api, urls[p % len(urls)], run,
                                               range(p, cfg.tasks, cfg.producers)))
                 for p in range(cfg.producers)]
    try:
        await asyncio.wait_for(run.finished.wait(), cfg.run_timeout_s)
        timed_out = False
    except asyncio.TimeoutError:
        timed_out = True
    for t in workers + producers:
        t.cancel()
    await asyncio.gather(*workers, *producers, return_exceptions=True)
    elapsed = (run.t_last or time.perf_counter()) - run.t_first
    return {"tasks_per_s": run.completed / elapsed if elapsed > 0 else 0.0,
            "submit_per_s": run.acked / max((run.t_submitted or time.perf_counter()) - run.t_first, 1e-9),
            "elapsed_s": elapsed, "acked": run.acked, "completed": run.completed,
            "submit_errors": run.submit_errors, "complete_errors": run.complete_errors,
            "timed_out": timed_out, "by_prefix": dict(run.by_prefix)}


_WASTE = re.compile(r"^tsched_raft_(resent_entries|truncations)_total (\S+)$", re.M)


async def metric_sums(api: Api, urls: list[str], pattern: re.Pattern,
                      combine: Callable[[float, float], float] = operator.add) -> dict[str, float]:
    """The `/metrics` values matched by `pattern` (groups: name, value), summed over the nodes
    by name (or combined by `combine`, e.g. `max`); a node that has no such metric adds
    nothing."""
    sums: dict[str, float] = {}
    for url in urls:
        async with api.session.get(url + "/metrics") as r:
            for name, value in pattern.findall(await r.text()):
                sums[name] = combine(sums[name], float(value)) if name in sums else float(value)
    return sums


# Each generation's longest garbage-collection pause (node/gcpolicy.py), in seconds.
_GC_PAUSES = re.compile(r'^tsched_gc_pause_seconds_max\{generation="(\d)"\} (\S+)$', re.M)


async def longest_gc_pauses(api: Api, urls: list[str]) -> dict[str, float]:
    """Each generation's ("0", "1", "2") longest collection pause on any node, in seconds
    (nodes older than this metric report none)."""
    return await metric_sums(api, urls, _GC_PAUSES, max)


def report_gc_pauses(report: Report, prefix: str, pauses: dict[str, float]) -> None:
    for generation in "012":
        report.figure(f"{prefix}_longest_gc_pause_ms_generation_{generation}",
                      [pauses.get(generation, float("nan")) * 1000], "ms")


async def replication_waste(api: Api, urls: list[str]) -> dict[str, float]:
    """Entries re-sent and log truncations so far, summed over the nodes (both should stay
    0 in normal operation; nodes older than these counters report none)."""
    return await metric_sums(api, urls, _WASTE)


def describe_run(i: int, r: dict) -> str:
    flag = " TIMED OUT" if r["timed_out"] else ""
    mode = " (completions on claims)" if r.get("carry") else ""
    return (f"run {i}{mode}: {r['tasks_per_s']:,.0f} lifecycles/s ({r['completed']}/{r['acked']} "
            f"completed in {r['elapsed_s']:.2f} s; submits alone {r['submit_per_s']:,.0f}/s; "
            f"errors submit={r['submit_errors']} claim/complete={r['complete_errors']}; "
            f"{r.get('cpu_ms_per_task', float('nan')):.3f} ms CPU per lifecycle, nodes + client){flag}")


async def measure(urls: list[str], cfg: Config, runs: int, report: Report,
                  warmup_tasks: int = 2000, carry: bool = False) -> list[dict]:
    """`runs` runs; with `carry` each is followed by one whose completions ride on claims
    (those results have "carry": True)."""
    async with Api() as api:
        if warmup_tasks:
            warm = Config(**{**asdict(cfg), "tasks": min(warmup_tasks, cfg.tasks)})
            await run_once(api, urls, warm, "warmup")
        results = []
        for i in range(runs):
            for mode in ((False, True) if carry else (cfg.carry,)):
                cpu0 = contention.tree_cpu_s()
                r = await run_once(api, urls, replace(cfg, carry=mode))
                # CPU that nodes + client spent per lifecycle: what bounds throughput on a
                # machine this small, whatever other processes take.
                r["cpu_ms_per_task"] = (contention.tree_cpu_s() - cpu0) * 1000 / max(r["completed"], 1)
                r["carry"] = mode
                report.note(describe_run(i + 1, r))
                results.append(r)
        waste = await replication_waste(api, urls)
        report.note("replication waste over all runs: " + (", ".join(
            f"{k.replace('_', ' ')} {v:,.0f}" for k, v in sorted(waste.items())) or "not counted"))
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--runs", type=int, default=3)
    d = Config()
    p.add_argument("--tasks", type=int, default=d.tasks, help="tasks per run")
    p.add_argument("--producers", type=int, default=d.producers)
    p.add_argument("--batch", type=int, default=d.batch, help="tasks per submit (<= 1000)")
    p.add_argument("--workers", type=int, default=d.workers, help="concurrent claim loops")
    p.add_argument("--claim-max", type=int, default=d.claim_max, help="max_tasks per claim (<= 100)")
    p.add_argument("--carry", action="store_true",
                   help="after each run, one with completions riding on claims (both printed)")
    p.add_argument("--full-answers", action="store_true",
                   help="submits, claims and completions answered by whole tasks (no Prefer: return=minimal)")
    p.add_argument("--baseline", metavar="REV",
                   help="also run that revision's nodes, on a cluster of their own, alternating")
    p.add_argument("--rounds", type=int, default=1,
                   help="clusters per side (each runs --runs runs); alternating with --baseline")
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    add_compiled_flag(p, baseline=True)
    add_common_flags(p)
    args = p.parse_args(argv)
    if args.baseline_compiled and not args.baseline:
        p.error("--baseline-compiled needs --baseline REV")
    return args


def config_from(args: argparse.Namespace) -> Config:
    return Config(tasks=args.tasks, producers=args.producers, batch=args.batch,
                  workers=args.workers, claim_max=args.claim_max,
                  minimal=not args.full_answers)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loop_name = install_fast_loop()
    cfg = config_from(args)
    report = Report("task lifecycles per second (submit + claim + complete)", "bench.lifecycle",
                    args, {"nodes": args.nodes, "runs": args.runs, "rounds": args.rounds,
                           **asdict(cfg), "carry_runs": args.carry,
                           "baseline": args.baseline or "-", "client_loop": loop_name,
                           "state_machine": nodes_build(args),
                           "baseline_state_machine": "compiled" if args.baseline_compiled
                           else "python",
                           "durability": "node default (fsync)"},
                    data_dir=tempfile.gettempdir())
    with tempfile.TemporaryDirectory(prefix="tsched-bench-nodes-") as tmp:
        this = compiled_tree(os.path.join(tmp, "compiled")) if args.compiled else None
        sides: dict[str, str | None] = {"": this}
        if args.baseline:
            base = (compiled_tree(os.path.join(tmp, "baseline"), args.baseline)
                    if args.baseline_compiled else extract_tree(args.baseline, tmp))
            sides = {"_baseline": base, "": this}
        report.start()   # after the builds: the machine's load is metered over the runs
        results: dict[str, list[dict]] = {side: [] for side in sides}
        for rnd in range(args.rounds):
            for side, path in sides.items():
                report.note(f"round {rnd + 1}: nodes of "
                            + (f"{args.baseline} (baseline)" if side else "this code"))
                with LocalCluster(args.nodes, keep=args.keep,
                                  env={"PYTHONPATH": path} if path else None) as cluster:
                    cluster.wait_writable()
                    results[side] += asyncio.run(measure(cluster.urls, cfg, args.runs, report,
                                                         carry=args.carry))
    for side, got in results.items():
        report_side(report, args, side, got)
    report.finish()
    return 0


def report_side(report: Report, args: argparse.Namespace, side: str, got: list[dict]) -> None:
    """The figures of one side (suffix "" for this code), plain runs then carried ones."""
    for carry in sorted({r["carry"] for r in got}):
        runs = [r for r in got if r["carry"] == carry]
        tag = ("_carry" if carry else "") + side
        headline = not tag and args.nodes == 3
        report.figure(f"lifecycles_per_s_{args.nodes}_nodes{tag}", [r["tasks_per_s"] for r in runs],
                      "/s", TARGET if headline else None)
        report.figure(f"submits_per_s_while_claiming{tag}", [r["submit_per_s"] for r in runs], "/s")
        cpu = report.figure(f"cpu_ms_per_lifecycle{tag}", [r["cpu_ms_per_task"] for r in runs], "ms")
        if not tag:
            cores = len(os.sched_getaffinity(0))
            report.figure("cpu_bound_lifecycles_per_s", [cores * 1000 / cpu], "/s",
                          f"the most {cores} idle cores could do at this CPU cost")


if __name__ == "__main__":
    sys.exit(main())
