"""Group-commit order, proven with a crash: a follower process exits right after it sends an
ack; every index it acked must then be in its LMDB log. With `skip_sync_before_send` also
on, the same check must detect the loss (so this test can fail)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.raft_options import FAST
from tests.harness.waits import wait_until
from tests.integration.raft_support import (cluster_spec, leader_of, make_replica, propose_sync,
                                            submit)
from tsched.node.failpoints import CRASH_EXIT_CODE
from tsched.node.raft.journal import read_entries

pytestmark = pytest.mark.timeout(120)
# The child replica: raft_support.py run as a module from the repository root.
SUPPORT = ("-m", "tests.integration.raft_support")
ROOT = Path(__file__).resolve().parents[2]
# The child never stands for election during the test, so it stays a follower.
PASSIVE = dataclasses.replace(FAST, raft_min_timeout_s=60.0, raft_max_timeout_s=61.0)


def run_crash_after_ack(tmp_path: Path, failpoints: str) -> tuple[int, int, int]:
    """(leader's last index, index the child acked, last index in its LMDB log after)."""
    specs = cluster_spec(tmp_path)
    replicas = [make_replica(s) for s in specs[:2]]
    record = tmp_path / "acked.txt"
    config = tmp_path / "child.json"
    config.write_text(json.dumps({"spec": specs[2], "status_path": str(tmp_path / "status.json"),
                                  "options": dataclasses.asdict(PASSIVE)}))
    env = {**os.environ, "TSCHED_FAILPOINTS": failpoints, "TSCHED_FAILPOINTS_RECORD": str(record)}
    try:
        for r in replicas:
            r.start()
        leader = wait_until(lambda: leader_of(replicas), 15, "a leader among the two")
        propose_sync(leader, [submit(f"pre{i}") for i in range(5)])
        leader_last = leader._journal[-1][1]
        with open(tmp_path / "child.err", "wb") as err:
            child = subprocess.Popen([sys.executable, *SUPPORT, str(config)], env=env, cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=err)
        try:
            code = child.wait(timeout=30)    # it crashes on its first ack of new entries
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert code == CRASH_EXIT_CODE, (tmp_path / "child.err").read_text()
    finally:
        for r in replicas:
            r.stop()
    acked = int(record.read_text().split()[-1])
    durable = read_entries(Path(specs[2]["data_dir"]) / "raft-log")
    return leader_last, acked, (durable[-1][1] if durable else 0)


def test_every_acked_index_is_in_the_lmdb_log(tmp_path):
    leader_last, acked, last_durable = run_crash_after_ack(tmp_path, "crash_after_ack")
    assert acked == leader_last           # the whole log, caught up in one append
    assert last_durable >= acked


def test_skipping_the_sync_before_send_is_detected(tmp_path):
    leader_last, acked, last_durable = run_crash_after_ack(
        tmp_path, "crash_after_ack,skip_sync_before_send")
    assert acked == leader_last
    assert last_durable < acked           # acked, yet gone after the crash
