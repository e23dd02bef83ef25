"""Run every benchmark with its defaults, one after another, and print the README table.

Each benchmark writes its figures to `--out` (default bench/results/, not committed) as
JSON; the table lists, per DESIGN.md target, the measured median and the target.

    python -m bench.all                        # about 10 minutes on 2 cores
    python -m bench.all --only lifecycle,latency
    python -m bench.all --table-only           # reprint the table from the last results
    python -m bench.all --compiled             # every node on the compiled state machine

With `--compiled` a wheel of this checkout is built once with the compiled state machine
(`TSCHED_COMPILE=1`, setup.py) and every benchmark, with the nodes it starts, imports it
(`PYTHONPATH`); the table's code column says which build each figure is of.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.revision import compiled_tree  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BENCHES = {
    "lifecycle": ["bench.lifecycle"],
    "lifecycle5": ["bench.lifecycle", "--nodes", "5"],
    "latency": ["bench.latency"],
    "lateness": ["bench.lateness"],
    "worker": ["bench.worker"],
    "failover": ["bench.failover"],
    "scale": ["bench.scale"],
    "faults": ["bench.faults"],
    "celery": ["bench.peers.celery_redis"],
    # Precision rather than capacity: a rate both systems sustain on a busy 2-core machine.
    "celery200": ["bench.peers.celery_redis", "--workloads", "lateness", "--rate", "200",
                  "--duration-s", "20"],
    "scale1m": ["bench.scale", "--max", "1000000"],   # about 10 minutes: not in the default
}
DEFAULT = [name for name in BENCHES if name != "scale1m"]
# (label, result file, figure key, field, target text)
ROWS = [
    ("lifecycles/s, 3 nodes", "lifecycle", "lifecycles_per_s_3_nodes", "median", ">= 10,000"),
    ("CPU per lifecycle, 3 nodes + client", "lifecycle", "cpu_ms_per_lifecycle", "median", "-"),
    ("lifecycles/s 2 idle cores could do at that CPU cost", "lifecycle", "cpu_bound_lifecycles_per_s",
     "median", ">= 10,000"),
    ("lifecycles/s, 5 nodes", "lifecycle5", "lifecycles_per_s_5_nodes", "median", "-"),
    ("submit ack p50", "latency", "submit_ack_p50_ms", "median", "<= 15 ms"),
    ("submit ack p99", "latency", "submit_ack_p99_ms", "median", "<= 40 ms"),
    ("one Worker process, no-op handler, concurrency 4", "worker", "worker_tasks_per_s_c4",
     "median", ">= 6,000 /s"),
    ("one Worker process, no-op handler, concurrency 32", "worker", "worker_tasks_per_s_c32",
     "median", "-"),
    ("lateness p99, Worker prefetch", "lateness", "lateness_ms_prefetch", "p99", "<= 5 ms"),
    ("lateness p99, no prefetch", "lateness", "lateness_ms_no_prefetch", "p99", "<= 50 ms"),
    ("leader kill -> first write", "failover", "failover_first_write_s", "median", "<= 3 s"),
    ("leader kill -> first claim", "failover", "failover_first_claim_s", "median", "-"),
    ("acknowledged tasks lost under faults", "faults", "lost_acknowledged_tasks", "median",
     "0"),
    ("stale completions accepted under faults", "faults", "stale_completions_accepted",
     "median", "0"),
    ("bytes per pending task (largest level)", "scale", "bytes_per_pending_task_at_*", "median",
     "<= ~1,070 B (1M in 1 GiB)"),
    ("claim p50 ratio largest/smallest level", "scale", "claim_p50_ratio_*", "median", "about 1"),
    ("restart to first read", "scale", "restart_to_first_read_s_at_*", "median", "<= 15 s at 1M"),
    ("GET /v1/cluster (largest level)", "scale", "cluster_status_ms_at_*", "p50", "-"),
    ("bytes per pending task at 1M", "scale1m", "bytes_per_pending_task_at_1000000", "median",
     "<= ~1,070 B (1M in 1 GiB)"),
    ("claim p50 ratio 1M/10K", "scale1m", "claim_p50_ratio_1000000_over_10000", "median", "about 1"),
    ("restart to first read at 1M", "scale1m", "restart_to_first_read_s_at_1000000", "median", "<= 15 s"),
    ("GET /v1/cluster at 1M", "scale1m", "cluster_status_ms_at_1000000", "p50", "-"),
    ("Celery lifecycles/s (same run)", "celery", "celery_lifecycles_per_s", "median", "-"),
    ("tsched/Celery lifecycles", "celery", "ratio_lifecycles_tsched_over_celery", "median", "-"),
    ("tsched lifecycles/s (Celery's run)", "celery", "tsched_lifecycles_per_s", "median", ">= 10,000"),
    ("Celery ETA lateness p99", "celery", "celery_lateness_ms", "p99", "-"),
    ("tsched prefetch lateness p99 (Celery's run)", "celery", "tsched_lateness_ms_prefetch", "p99",
     "<= 5 ms"),
    ("tsched/Celery lateness p99", "celery", "ratio_lateness_p99_tsched_over_celery", "median", "<= 1"),
    ("Celery ETA lateness p99 at 200/s", "celery200", "celery_lateness_ms", "p99", "-"),
    ("tsched prefetch lateness p99 at 200/s", "celery200", "tsched_lateness_ms_prefetch", "p99",
     "<= 5 ms"),
    ("tsched/Celery lateness p99 at 200/s", "celery200", "ratio_lateness_p99_tsched_over_celery",
     "median", "<= 1"),
]


def _find(figures: dict, key: str) -> tuple[str, dict] | None:
    if key.endswith("*"):
        def level(k: str) -> int:
            digits = "".join(c if c.isdigit() else " " for c in k[len(key) - 1:]).split()
            return int(digits[0]) if digits else 0
        hits = sorted((k for k in figures if k.startswith(key[:-1])), key=level)
        return (hits[-1], figures[hits[-1]]) if hits else None
    return (key, figures[key]) if key in figures else None


def table(out: Path) -> str:
    lines = ["| figure | measured | target | run (UTC) | code | others' CPU (cores of 2) |",
             "|---|---|---|---|---|---|"]
    for label, name, key, field, target in ROWS:
        path = out / f"{name}.json"
        if not path.exists():
            lines.append(f"| {label} | not run | {target} | | | |")
            continue
        doc = json.loads(path.read_text())
        found = _find(doc["figures"], key)
        if not found:
            lines.append(f"| {label} | missing | {target} | {doc['started']} | | |")
            continue
        fkey, fig = found
        value = fig.get(field)
        shown = "n/a"
        if isinstance(value, (int, float)):
            shown = f"{value:.3g} {fig['unit']}" if 0 < abs(value) < 0.1 else f"{value:,.2f} {fig['unit']}"
        if fkey != key:
            label = f"{label} ({fkey[len(key) - 1:]})"
        code = doc["machine"].get("code", "?")
        if doc["machine"].get("tsched_build") == "compiled":
            code += " compiled"
        lines.append(f"| {label} | {shown} | {target} | {doc['started']} | "
                     f"{code} | {doc['usage']['others_cores']:.2f} |")
    return "\n".join(lines)


def _run_all(names: list[str], out: Path, env: dict[str, str] | None) -> list[str]:
    failed = []
    for name in names:
        cmd = [sys.executable, "-m", *BENCHES[name], "--json", str(out / f"{name}.json")]
        print(f"\n### {' '.join(cmd[1:])}", flush=True)
        if subprocess.run(cmd, cwd=str(REPO), env=env).returncode != 0:
            failed.append(name)
    return failed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(DEFAULT), help=f"from: {', '.join(BENCHES)}")
    p.add_argument("--out", default=str(REPO / "bench" / "results"))
    p.add_argument("--table-only", action="store_true")
    p.add_argument("--compiled", action="store_true",
                   help="run every benchmark and its nodes on the compiled state machine")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    if not args.table_only:
        with tempfile.TemporaryDirectory(prefix="tsched-bench-all-") as tmp:
            env = None
            if args.compiled:
                site = compiled_tree(tmp)
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                    [site, os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [site])}
            failed = _run_all([n for n in args.only.split(",") if n], out, env)
    print("\n" + table(out))
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
