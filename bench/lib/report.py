"""Printing of benchmark figures: what was measured, how to reproduce it, and where.

Every script prints a header (title, reproducing command, machine, configuration), its
figures (medians of the runs, with each run shown), and how busy the machine was; with
`--json PATH` it also writes them for bench/README.md's table.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from typing import Any, Sequence

from . import contention, machine, stats


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON here")


def _fmt(value: float, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit in ("ms",) and abs(value) < 100:
        return f"{value:.2f} {unit}"
    if abs(value) >= 100:
        return f"{value:,.0f} {unit}"
    if 0 < abs(value) < 0.1:
        return f"{value:.3g} {unit}"
    return f"{value:.2f} {unit}"


class Report:
    def __init__(self, title: str, module: str, args: argparse.Namespace,
                 config: dict[str, Any], data_dir: str | None = None) -> None:
        self.title, self.args, self.config = title, args, config
        self.command = "python -m " + module + "".join(" " + shlex.quote(a) for a in sys.argv[1:])
        self.machine = machine.describe(data_dir)
        self.meter = contention.Meter()
        self.figures: dict[str, Any] = {}
        self.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def start(self) -> "Report":
        print(f"== {self.title}", flush=True)
        print(f"command : {self.command}")
        print("machine : " + ", ".join(f"{k}={v}" for k, v in self.machine.items()))
        print("config  : " + ", ".join(f"{k}={v}" for k, v in self.config.items()))
        print(f"started : {self.started}", flush=True)
        self.meter.start()
        return self

    def note(self, text: str) -> None:
        print(f"  .. {text}", flush=True)

    def figure(self, key: str, runs: Sequence[float], unit: str, target: str | None = None) -> float:
        """A figure measured once per run; prints the median and every run."""
        med = stats.median(runs)
        each = ", ".join(_fmt(r, unit) for r in runs)
        tgt = f"   (target {target})" if target else ""
        print(f"FIGURE {key}: {_fmt(med, unit)} median of {len(runs)} run(s) [{each}]{tgt}",
              flush=True)
        self.figures[key] = {"median": med, "runs": list(runs), "unit": unit, "target": target}
        return med

    def distribution(self, key: str, samples: Sequence[float], unit: str = "ms",
                     target: str | None = None) -> dict[str, float]:
        """A latency distribution: p50 / p95 / p99 / max over all samples."""
        s = stats.summary(samples)
        parts = ", ".join(f"{k}={_fmt(v, unit)}" for k, v in s.items() if k != "n")
        tgt = f"   (target {target})" if target else ""
        print(f"FIGURE {key}: {parts} over {s['n']} samples{tgt}", flush=True)
        self.figures[key] = {**s, "unit": unit, "target": target}
        return s

    def finish(self) -> None:
        usage = self.meter.stop()
        print("machine load: " + contention.describe(usage), flush=True)
        if self.args.json:
            doc = {"title": self.title, "command": self.command, "started": self.started,
                   "machine": self.machine, "config": self.config, "usage": usage,
                   "figures": self.figures}
            with open(self.args.json, "w") as f:
                json.dump(doc, f, indent=2, default=str)
            print(f"figures written to {self.args.json}")
