"""A long fault-free lifecycle run: what an operator would see after minutes of full load.

The lifecycle workload of `bench.lifecycle` (batched submits, long-polling claims, batched
completions) runs back to back on one 3-node cluster for `--duration-s`, then the nodes'
logs are read for lines at ERROR or CRITICAL (in normal operation there must be none:
those levels page a person) and `/metrics` for Raft entries re-sent and log truncations
(both must stay 0 without faults, `node/raft/replication.py`). It also prints what tells why
they would not: Raft ticks later than half an election timeout (the watchdog's lines and
`/metrics`), the longest gap between ticks, apply slices cut (`node/raft/apply_budget.py`), the
highest term (1 + the elections) and each generation's longest garbage-collection pause
on any node (`node/gcpolicy.py`).

    python -m bench.soak                      # 10 minutes, 3 nodes
    python -m bench.soak --duration-s 60      # a short look
    python -m bench.soak --nodes-of 43d0e1b   # that revision's nodes (its node/, statemachine/)
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.api import Api, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.lib.revision import extract_tree  # noqa: E402
from bench.lifecycle import (Config, longest_gc_pauses, metric_sums,  # noqa: E402
                             replication_waste, report_gc_pauses, run_once)

# The node's log format: "<ISO time> <LEVEL> <logger> ..." (node/main.py).
_ALARM = re.compile(r"^\S+ (ERROR|CRITICAL) ", re.M)
ALARM_LINES_SHOWN_MAX = 20       # the figure counts them all; the report quotes the first few
# Signs of a Raft thread held too long (node/raft/watchdog.py, node/raft/apply_budget.py), summed.
_STALLS = re.compile(r"^tsched_raft_(late_ticks|apply_slices_cut)_total (\S+)$", re.M)
# The watchdog's WARNING line (node/raft/watchdog.py).
_LATE = re.compile(r" raft: (\d+) tick\(s\) late, the longest ([\d.]+) s between ticks")


def read_logs(log_paths: list[str]) -> dict[str, str]:
    """Each node log's text, by file name."""
    texts = {}
    for path in log_paths:
        with open(path, errors="replace") as f:
            texts[os.path.basename(path)] = f.read()
    return texts


def late_ticks_logged(logs: dict[str, str]) -> tuple[int, float]:
    """(late ticks, the longest gap in s) from the watchdog's WARNING lines."""
    count, longest = 0, 0.0
    for text in logs.values():
        for n, gap in _LATE.findall(text):
            count, longest = count + int(n), max(longest, float(gap))
    return count, longest


def alarm_lines(logs: dict[str, str]) -> list[str]:
    """Every line at ERROR or CRITICAL in the node logs, prefixed by the file's name."""
    return [f"{name}: {line}" for name, text in logs.items() for line in text.splitlines()
            if _ALARM.match(line)]


async def soak(urls: list[str], cfg: Config, duration_s: float, report: Report) -> dict:
    """Runs of `cfg.tasks` lifecycles back to back until `duration_s` has passed."""
    totals = {"runs": 0, "completed": 0, "submit_errors": 0, "complete_errors": 0,
              "timed_out": 0}
    rates = []
    end = time.monotonic() + duration_s
    async with Api() as api:
        while time.monotonic() < end:
            r = await run_once(api, urls, cfg, "soak")
            totals["runs"] += 1
            totals["completed"] += r["completed"]
            totals["submit_errors"] += r["submit_errors"]
            totals["complete_errors"] += r["complete_errors"]
            totals["timed_out"] += int(r["timed_out"])
            rates.append(r["tasks_per_s"])
            if totals["runs"] % 10 == 0:
                report.note(f"{totals['runs']} runs, {totals['completed']:,} lifecycles, "
                            f"{end - time.monotonic():,.0f} s left")
        waste = await replication_waste(api, urls)
        stalls = await raft_stalls(api, urls)
        gc_pauses = await longest_gc_pauses(api, urls)
    return {**totals, "rates": rates, "waste": waste, "stalls": stalls, "gc_pauses": gc_pauses}


async def raft_stalls(api: Api, urls: list[str]) -> dict[str, float]:
    """Late Raft ticks and cut apply slices summed over the nodes, and the highest term
    (1 + the elections since the cluster formed)."""
    found = await metric_sums(api, urls, _STALLS)
    terms = [(await api.call("GET", url + "/v1/cluster/self"))["term"] for url in urls]
    return {**found, "term": float(max(terms))}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration-s", type=float, default=600.0)
    p.add_argument("--tasks", type=int, default=Config().tasks, help="tasks per run")
    p.add_argument("--keep", action="store_true", help="keep the cluster's data and logs")
    p.add_argument("--nodes-of", metavar="REV", help="run that git revision's nodes instead")
    add_common_flags(p)
    args = p.parse_args(argv)
    if args.duration_s <= 0 or args.tasks <= 0:
        p.error("--duration-s and --tasks must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loop_name = install_fast_loop()
    cfg = Config(tasks=args.tasks)
    with tempfile.TemporaryDirectory(prefix="tsched-bench-nodes-") as tmp, \
            LocalCluster(3, keep=args.keep, env={"PYTHONPATH": extract_tree(args.nodes_of, tmp)}
                         if args.nodes_of else None) as cluster:
        report = Report("fault-free lifecycle soak: alarms and replication waste", "bench.soak",
                        args, {"nodes": 3, "duration_s": args.duration_s, **asdict(cfg),
                               "nodes_of": args.nodes_of or "this code",
                               "client_loop": loop_name}, data_dir=cluster.root)
        cluster.wait_writable()
        report.start()
        r = asyncio.run(soak(cluster.urls, cfg, args.duration_s, report))
        logs = read_logs([os.path.join(cluster.root, f"{i}.log") for i in cluster.ids])
        alarms = alarm_lines(logs)
        late, longest_s = late_ticks_logged(logs)
        for line in alarms[:ALARM_LINES_SHOWN_MAX]:
            report.note("alarm: " + line)
        report.note(f"{r['runs']} runs, {r['completed']:,} lifecycles; errors submit="
                    f"{r['submit_errors']} claim/complete={r['complete_errors']}; runs timed "
                    f"out {r['timed_out']}")
        report.figure("soak_lifecycles_per_s", r["rates"], "/s")
        report.figure("soak_lifecycles", [r["completed"]], "")
        report.figure("soak_error_or_critical_lines", [len(alarms)], "", "0")
        for name in ("resent_entries", "truncations"):
            report.figure(f"soak_raft_{name}", [r["waste"].get(name, float("nan"))], "", "0")
        report.figure("soak_late_ticks_logged", [late], "")
        report.figure("soak_longest_tick_gap_s", [longest_s], "s")
        for name in ("late_ticks", "apply_slices_cut", "term"):
            report.figure(f"soak_raft_{name}", [r["stalls"].get(name, float("nan"))], "")
        report_gc_pauses(report, "soak", r["gc_pauses"])
        if alarms or any(r["waste"].values()):
            cluster.keep = True      # the nodes' logs tell what happened
            report.note(f"kept the cluster's logs for diagnosis: {cluster.root}")
        report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
