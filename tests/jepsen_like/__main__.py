"""`python -m tests.jepsen_like --duration S --seed N --out DIR [--nodes 3|5] [--shards S]
[--code DIR]`."""
from __future__ import annotations

import argparse
import json
import os
import sys

from .nemesis import FAULTS
from .runner import run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.jepsen_like",
                                description="Fault-injection run against real tsnode processes")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of faults + load")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True, help="folder for logs, history, summary")
    p.add_argument("--nodes", type=int, choices=(3, 5), default=3)
    p.add_argument("--shards", type=int, default=1,
                   help="Raft groups (1..64); every guarantee is checked per shard")
    p.add_argument("--failpoint", action="append", default=[],
                   help="node failpoint to turn on (repeatable)")
    p.add_argument("--faults", default=",".join(FAULTS),
                   help=f"comma-separated subset of: {','.join(FAULTS)}")
    p.add_argument("--code", help="run the nodes from this folder's tsched/ (e.g. an unpacked "
                   "wheel of the compiled build) instead of the checkout")
    a = p.parse_args(argv)
    faults = tuple(f for f in a.faults.split(",") if f)
    unknown = sorted(set(faults) - set(FAULTS))
    if unknown:
        p.error(f"unknown faults {unknown}")
    if not 1 <= a.shards <= 64:
        p.error("--shards must be in 1..64")
    if a.code and not os.path.isdir(os.path.join(a.code, "tsched", "node")):
        p.error(f"--code {a.code}: no tsched/node in it")
    summary = run(a.out, a.duration, a.seed, a.nodes, tuple(a.failpoint), faults, a.shards,
                  a.code)
    print(json.dumps(summary))
    return 0 if summary["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
