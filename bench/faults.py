"""Acknowledged tasks lost and completions with stale tokens accepted, under faults.

Runs the partition-fault harness (`python -m tests.jepsen_like`: real nodes behind
fault-injecting proxies, partitions, kill -9, SIGSTOP, clock jumps, zombie workers) for
each seed and reports its checker's counts. The DESIGN target is 0 and 0; the other
checks (double leases, caps, cancels, fires, digests) are printed too.

    python -m bench.faults                          # 2 seeds x 60 s (totals over seeds)
    python -m bench.faults --seeds 1,2,3 --duration-s 120 --nodes 5
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.lib.report import Report, add_common_flags

REPO = Path(__file__).resolve().parents[1]


def run_seed(seed: int, duration_s: float, nodes: int, out: str) -> dict:
    cmd = [sys.executable, "-m", "tests.jepsen_like", "--duration", str(duration_s),
           "--seed", str(seed), "--nodes", str(nodes), "--out", out]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"seed {seed}: no summary (exit {done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--nodes", type=int, choices=(3, 5), default=3)
    p.add_argument("--keep", action="store_true", help="keep each run's history and logs")
    add_common_flags(p)
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    report = Report("guarantees under faults (tests/jepsen_like)", "bench.faults", args,
                    {"nodes": args.nodes, "seeds": args.seeds, "duration_s": args.duration_s})
    report.start()
    summaries = []
    for seed in seeds:
        out = tempfile.mkdtemp(prefix=f"tsched-faults-{seed}-")
        s = run_seed(seed, args.duration_s, args.nodes, out)
        summaries.append(s)
        keep = args.keep or not s["valid"]   # an invalid run keeps its evidence
        report.note(f"seed {seed}: {s['ops']} operations, faults {s['nemesis']}, "
                    f"checks {s['checks']}, valid={s['valid']}, unavailable "
                    f"{s['unavailability']}" + (f"; history and violations in {out}"
                                                if keep else ""))
        if not keep:
            subprocess.run(["rm", "-rf", out], check=False)
    # Totals over every seed (one value each): a single violation anywhere counts.
    report.figure("lost_acknowledged_tasks",
                  [sum(s["checks"]["lost"] for s in summaries)], "tasks", "0")
    report.figure("stale_completions_accepted",
                  [sum(s["checks"]["stale_accepted"] for s in summaries)], "completions", "0")
    report.figure("checker_violations_all_kinds",
                  [sum(sum(s["checks"].values()) for s in summaries)], "violations", "0")
    report.figure("operations_checked", [sum(s["ops"] for s in summaries)], "operations")
    report.finish()
    return 0 if all(s["valid"] for s in summaries) else 1


if __name__ == "__main__":
    raise SystemExit(main())
