"""Catch-up of a follower that was down while N tasks were submitted: how long until it
serves reads at the leader's sequence, and how many elections the cluster saw meanwhile.

A 3-node cluster; one follower gets SIGTERM; N due tasks are submitted in batches of 500
(payload ~100 B) through the two others; the leader's applied_seq and term are noted; the
follower is started again. Figures: process start -> its /readyz answers ready at (at
least) the leader's applied_seq, and the number of terms the cluster went through from the
restart to that moment (0 = no election; each election raises the term at least once).

    python -m bench.catchup                      # 100,000 tasks behind, 1 run
    python -m bench.catchup --tasks 1000000      # 1,000,000 behind (several minutes to fill)
"""
from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.api import Api, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster, http_json  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.scale import fill  # noqa: E402

TARGET_TIME = "<= 30 s at 1,000,000 tasks behind"
TARGET_ELECTIONS = "0"
CATCHUP_MAX_S = 600.0
POLL_S = 0.05


def term_of(cluster: LocalCluster, node: str) -> int | None:
    try:
        code, body = http_json("GET", cluster.url(node) + "/v1/cluster/self", timeout_s=5)
    except OSError:
        return None
    return body.get("term") if code == 200 and isinstance(body, dict) else None


def wait_caught_up(cluster: LocalCluster, node: str, seq: int, others: list[str]) -> tuple[float, int]:
    """(seconds from start to ready at `seq`, the highest term seen meanwhile)."""
    started = time.perf_counter()
    top = 0
    while time.perf_counter() - started < CATCHUP_MAX_S:
        for other in others:      # /v1/cluster/self hashes the state: only the small side
            top = max(top, term_of(cluster, other) or 0)
        st = cluster.readiness(node)
        if st and st["ready"] and (st.get("applied_seq") or 0) >= seq:
            return time.perf_counter() - started, top
        time.sleep(POLL_S)
    raise RuntimeError(f"{node} did not catch up within {CATCHUP_MAX_S} s; logs in {cluster.root}")


async def one_run(cluster: LocalCluster, args, report: Report, k: int) -> dict:
    lead = cluster.wait_leader()
    behind = [i for i in cluster.ids if i != lead][0]
    others = [i for i in cluster.ids if i != behind]
    cluster.kill(behind, signal.SIGTERM)
    async with Api() as api:
        await fill(api, [cluster.url(i) for i in others], f"catchup-{k}-{uuid.uuid4().hex[:4]}",
                   args.tasks, 500, 4)
    lead = cluster.wait_leader()
    seq = (cluster.readiness(lead) or {}).get("applied_seq") or 0
    term = max(term_of(cluster, i) or 0 for i in others)
    cluster.procs[behind].killed = False      # type: ignore[attr-defined]
    cluster.start_node(behind)
    took_s, top = await asyncio.to_thread(wait_caught_up, cluster, behind, seq, others)
    report.note(f"run {k + 1}: {behind} {args.tasks:,} tasks behind (seq {seq}): ready at "
                f"the leader's seq after {took_s:.1f} s; terms {term} -> {top}")
    return {"s": took_s, "elections": top - term}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=100_000, help="tasks submitted while it is down")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    add_common_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_fast_loop()
    with LocalCluster(3, keep=args.keep) as cluster:
        report = Report("catch-up of a follower behind: time to serve at the leader's seq, elections",
                        "bench.catchup", args, {"nodes": 3, "tasks_behind": args.tasks},
                        data_dir=cluster.root)
        cluster.wait_writable()
        report.start()
        results = [asyncio.run(one_run(cluster, args, report, k)) for k in range(args.runs)]
        report.figure(f"catchup_{args.tasks}_s", [r["s"] for r in results], "s", TARGET_TIME)
        report.figure(f"catchup_{args.tasks}_elections", [r["elections"] for r in results], "",
                      TARGET_ELECTIONS)
        report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
