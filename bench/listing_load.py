"""Task listings beside a steady submitter, with 500,000 and 1,000,000 tasks kept.

A listing is answered under the lock the apply takes (DESIGN 7, "Task listings are
bounded"): a walk over every task held the leader's apply, and a client repeating
`GET /v1/tasks?task_type=<a type with 5 tasks>` raised the submit-ack p99 of its node.
This fills a 3-node cluster with pending tasks (batched submits; the 5 rare tasks first,
so an unindexed walk would cross every task to reach them), then on the leader, for each
level:

  1. one client submits single tasks at a steady rate (`--rate`, open loop) for
     `--seconds`: the submit-ack latency without listing;
  2. the same, while another client repeats `GET /v1/tasks?task_type=<rare>` back to back:
     the submit-ack latency with listing, and each listing's answer time;
  3. the same, while the other client pages through a filter no index serves (a tenant's
     `retrying` tasks: none, so every page examines `task_scan_max` tasks and answers an
     empty page with a cursor): the worst a page can hold the apply.

It also counts leader changes (every node's /readyz, polled) during each phase, and the
leader's garbage collections (its /metrics) during each.

The node's budget of listing pages (`[limits] list_pages_per_s`, node/api/read_budget.py)
paces the listing client: `--list-pages-per-s N` sets it (0: no budget; by default the
node's own default). The lister honours a 429's Retry-After, as `Client` does.

    python -m bench.listing_load                         # 500K and 1M (about 10 minutes)
    python -m bench.listing_load --levels 100000 --seconds 10     # a quick look
    python -m bench.listing_load --levels 500000 --nodes-of 346b3a6   # nodes of a revision
    python -m bench.listing_load --list-pages-per-s 0     # without the budget
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

from bench.lib import stats  # noqa: E402
from bench.lib.api import Api, HttpError, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.failover import FAILURES  # noqa: E402
from bench.scale import fill, wait_all_applied  # noqa: E402

LEVELS = (500_000, 1_000_000)
RARE_TASKS = 5
TARGET_RATIO = "<= 2 (submit-ack p99 with listing / without)"
LISTING_MS_MAX = 50     # a page's own answer time (an unbounded walk took ~60 ms at 500,000)
TARGET_LEADER = "0"
MIB = 1024 * 1024
IN_FLIGHT_MAX = 100


async def submitter(api: Api, base: str, rate_per_s: float, stop: asyncio.Event,
                    out: list[float], errors: list[str]) -> None:
    """Single-task submits at a steady rate, open loop: one starts every 1/rate s whatever
    the answers take (at most IN_FLIGHT_MAX at once), so a stalled node shows as latency,
    not as a lower rate."""
    task = {"task_type": "ack-probe", "tenant": "bench-ack", "delay_s": 3600}
    gate = asyncio.Semaphore(IN_FLIGHT_MAX)

    async def one() -> None:
        async with gate:
            t = time.perf_counter()
            try:
                await api.submit_one(base, task, timeout_s=30)
                out.append((time.perf_counter() - t) * 1000)
            except FAILURES as e:
                errors.append(repr(e))
    interval, due, running = 1.0 / rate_per_s, time.perf_counter(), set()
    while not stop.is_set():
        job = asyncio.create_task(one())
        running.add(job)
        job.add_done_callback(running.discard)
        due += interval
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
    await asyncio.gather(*running)


async def lister(api: Api, base: str, query: str, follow: bool, stop: asyncio.Event,
                 out: list[float], shown: list[int], refused: list[float]) -> None:
    """Repeats a listing back to back: the first page again (`follow` False), or each
    page after the last one's cursor, from the top again when it ends. A 429 (the node's
    budget of listing pages) is counted and its Retry-After waited, as `Client` does."""
    cursor = None
    while not stop.is_set():
        path = f"{base}/v1/tasks?{query}" + (f"&cursor={cursor}" if cursor else "")
        t = time.perf_counter()
        try:
            body = await api.call("GET", path, timeout_s=60)
        except HttpError as e:
            if e.status != 429:
                raise
            refused.append((time.perf_counter() - t) * 1000)
            details = (e.body or {}).get("error", {}).get("details", {})
            await asyncio.sleep(float(details.get("retry_after_s") or 1))
            continue
        out.append((time.perf_counter() - t) * 1000)
        shown.append(len(body["tasks"]))
        cursor = body.get("next_cursor") if follow else None


async def gc_counts(api: Api, base: str) -> dict[str, float]:
    """The node's collections by generation and longest pauses so far (its /metrics)."""
    async with api.session.get(base + "/metrics") as r:
        text = await r.text()
    out = {}
    for line in text.splitlines():
        for name in ("tsched_gc_collections", "tsched_gc_pause_seconds_max"):
            if line.startswith((name + "{", name + "_total{")):
                gen = line.split('generation="', 1)[1][0]
                out[f"{name}_{gen}"] = float(line.rsplit(" ", 1)[1])
    return out


async def leader_watch(cluster: LocalCluster, stop: asyncio.Event, seen: list) -> None:
    """Every node's view of the leader, twice a second; a change of the agreed leader or
    a moment without one is a leader change."""
    while not stop.is_set():
        seen.append(await asyncio.to_thread(cluster.leader))
        await asyncio.sleep(0.5)


def changes(seen: list) -> int:
    return sum(1 for a, b in zip(seen, seen[1:]) if a != b)


async def phase(api: Api, cluster: LocalCluster, base: str, args: argparse.Namespace,
                listing: tuple[str, bool] | None) -> dict:
    stop = asyncio.Event()
    acks: list[float] = []
    errors: list[str] = []
    answers: list[float] = []
    shown: list[int] = []
    refused: list[float] = []
    seen: list = []
    gc_before = await gc_counts(api, base)
    jobs = [asyncio.create_task(submitter(api, base, args.rate, stop, acks, errors)),
            asyncio.create_task(leader_watch(cluster, stop, seen))]
    if listing is not None:
        jobs.append(asyncio.create_task(lister(api, base, listing[0], listing[1], stop,
                                               answers, shown, refused)))
    await asyncio.sleep(args.seconds)
    stop.set()
    await asyncio.gather(*jobs)
    gc_after = await gc_counts(api, base)
    gc = {k: v - gc_before.get(k, 0) for k, v in gc_after.items() if "collections" in k}
    gc["pause_ms_max_since_start"] = 1000 * max(
        (v for k, v in gc_after.items() if "pause" in k), default=0.0)
    return {"acks": acks, "errors": errors, "answers": answers, "shown": shown,
            "refused": refused, "leader_changes": changes(seen), "gc": gc}


async def measure_level(api: Api, cluster: LocalCluster, level: int, rare: str,
                        args: argparse.Namespace, report: Report) -> None:
    lead = await asyncio.to_thread(cluster.wait_leader)
    base = cluster.url(lead)
    report.note(f"{level:,} tasks kept: RSS " + ", ".join(
        f"{i}={cluster.rss_bytes(i) / MIB:,.0f} MiB" for i in cluster.ids) + f"; leader {lead}")
    plain = await phase(api, cluster, base, args, None)
    rare_q = f"task_type={rare}"
    listed = await phase(api, cluster, base, args, (rare_q, False))
    bounded = await phase(api, cluster, base, args,
                          ("tenant=scale-0&state=retrying&limit=100", True))
    for name, run in (("without_listing", plain), ("with_rare_type_listing", listed),
                      ("with_bounded_pages", bounded)):
        report.distribution(f"submit_ack_ms_{name}_at_{level}", run["acks"], "ms")
        report.figure(f"leader_changes_{name}_at_{level}", [run["leader_changes"]], "",
                      TARGET_LEADER)
        if run["errors"]:
            report.note(f"{name}: {len(run['errors'])} submits failed, first: {run['errors'][0]}")
        g = run["gc"]
        report.note(f"{name}: leader's collections young/middle/full "
                    f"{g.get('tsched_gc_collections_0', 0):.0f}/"
                    f"{g.get('tsched_gc_collections_1', 0):.0f}/"
                    f"{g.get('tsched_gc_collections_2', 0):.0f}, longest pause since start "
                    f"{g['pause_ms_max_since_start']:.1f} ms")
    bound_ms = answer_bound_ms(args.list_pages_per_s)
    target = f"each answer <= {bound_ms:.0f} ms ({LISTING_MS_MAX} ms + its wait for the budget)"
    for name, run in (("rare_type_listing", listed), ("bounded_page", bounded)):
        report.distribution(f"{name}_ms_at_{level}", run["answers"], "ms", target)
        slow = sorted(a for a in run["answers"] if a > bound_ms)
        report.note(f"{name}: {len(run['answers'])} answers ({len(run['answers']) / args.seconds:,.0f}"
                    f"/s), {len(run['refused'])} refused 429, tasks per answer "
                    f"{sorted(set(run['shown']))[:5]}; {len(slow)} over {bound_ms:.0f} ms"
                    + (f" ({', '.join(f'{a:.0f}' for a in slow[-10:])} ms)" if slow else ""))
    base_p99 = stats.percentile(plain["acks"], 99)
    for name, run in (("rare_type_listing", listed), ("bounded_pages", bounded)):
        report.figure(f"submit_ack_p99_ratio_{name}_at_{level}",
                      [stats.percentile(run["acks"], 99) / base_p99], "x", TARGET_RATIO)


def answer_bound_ms(pages_per_s: int | None) -> float:
    """The stated bound of one answer to a client reading one page after another: the
    page's own LISTING_MS_MAX plus its wait for the budget, at most one token's interval
    (the bucket is never in debt when its next page arrives; node/api/read_budget.py)."""
    from tsched.statemachine.limits import API_LIMITS
    rate = API_LIMITS.list_pages_per_s if pages_per_s is None else pages_per_s
    return LISTING_MS_MAX + (1000 / rate if rate else 0)


async def measure(cluster: LocalCluster, args: argparse.Namespace, report: Report) -> None:
    task_type = f"fill-{uuid.uuid4().hex[:6]}"
    rare = f"rare-{uuid.uuid4().hex[:6]}"
    async with Api() as api:
        await wait_all_applied(cluster)
        # the rare tasks are the oldest: a walk from the newest crosses every task first
        await api.submit(cluster.urls[0], [{"task_type": rare, "tenant": "scale-1",
                                            "delay_s": 3600} for _ in range(RARE_TASKS)])
        kept = RARE_TASKS
        for level in args.levels:
            t = time.perf_counter()
            await fill(api, cluster.urls, task_type, level - kept, args.batch, args.producers)
            report.note(f"filled {kept:,} -> {level:,} in {time.perf_counter() - t:.0f} s")
            kept = level
            await wait_all_applied(cluster)
            await measure_level(api, cluster, level, rare, args, report)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")],
                   default=list(LEVELS), help="tasks kept, comma-separated, ascending")
    p.add_argument("--seconds", type=float, default=30.0, help="length of each phase")
    p.add_argument("--rate", type=float, default=50.0, help="submits per second")
    p.add_argument("--batch", type=int, default=1000, help="tasks per fill submit (<= 1000)")
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--nodes-of", metavar="REV",
                   help="run the nodes of this git revision (a before/after in two runs)")
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    p.add_argument("--list-pages-per-s", type=int, default=None,
                   help="[limits] list_pages_per_s of the nodes (0: no budget; default: "
                        "the node's default)")
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loop_name = install_fast_loop()
    with tempfile.TemporaryDirectory(prefix="tsched-rev-") as tmp:
        env = None
        if args.nodes_of:
            from bench.lib.revision import extract_tree
            env = {"PYTHONPATH": extract_tree(args.nodes_of, tmp)}
        cluster = LocalCluster(3, keep=args.keep, env=env)
        if args.list_pages_per_s is not None:
            with open(cluster.config_path, "a") as f:
                f.write(f"\n[limits]\nlist_pages_per_s = {args.list_pages_per_s}\n")
        with cluster:
            report = Report("listing load: submit-ack latency beside task listings",
                            "bench.listing_load", args,
                            {"nodes": 3, "levels": "/".join(f"{lv:,}" for lv in args.levels),
                             "phase_s": args.seconds, "submit_rate_per_s": args.rate,
                             "rare_tasks": RARE_TASKS, "nodes_of": args.nodes_of or "this",
                             "list_pages_per_s": "node default" if args.list_pages_per_s is None
                             else args.list_pages_per_s,
                             "client_loop": loop_name}, data_dir=cluster.root)
            cluster.wait_writable()
            report.start()
            asyncio.run(measure(cluster, args, report))
            report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
