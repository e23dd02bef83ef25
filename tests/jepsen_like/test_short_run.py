"""A short seeded fault run against real tsnode processes; it must be valid.

Find it with `-k short_run` or `-m slow`. Longer runs: `python -m tests.jepsen_like`.
"""
from __future__ import annotations

import json
import os

import pytest

from .runner import run

SHORT_RUN_S = 25.0
SEED = 7
SHARDS = 2      # two Raft groups: every guarantee is checked per shard


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_short_fault_run_is_valid(tmp_path):
    out = str(tmp_path / "run")
    summary = run(out, SHORT_RUN_S, SEED, shards=SHARDS)
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        assert json.load(f) == summary
    assert summary["ops"] > 100, summary                 # the workload really ran
    assert sum(summary["nemesis"].values()) >= 2, summary  # and so did faults (each holds 3-8 s)
    with open(os.path.join(out, "final.json"), encoding="utf-8") as f:
        final = json.load(f)
    proxy_bytes = final["proxy_bytes"]
    # every Raft pair of every shard and every client path really went through its proxy
    assert len(proxy_bytes) == 3 * SHARDS + 3, proxy_bytes
    assert all(v["forwarded"] > 0 for v in proxy_bytes.values()), proxy_bytes
    # both shards held tasks and had their replicas' digests compared
    assert {t[:2] for t in final["tasks"]} >= {"00", "01"}
    assert {d.get("shard") for d in final["digests"]} == {0, 1}
    assert summary["valid"], (f"seed {SEED}: {summary}; history {out}/history.jsonl, "
                              f"violations {out}/violations.json")
