"""Invariant OWN_DURABLE_COMMIT (node/raft/own_durability.py): a leader sends its entries
before its own fsync, and counts itself toward a majority only up to what its log writer
made durable. A one-node cluster makes the leader its own majority: with its writer held
(the `stall_log_writer` failpoint), a proposed entry must stay uncommitted, and commit once
the writer goes on. With `count_unsynced_entries` also on, the same check must detect the
early commit (so this test can fail)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.waits import wait_until
from tests.integration.raft_support import cluster_spec, make_replica, submit
from tsched.node.failpoints import Failpoints

pytestmark = pytest.mark.timeout(60)
TICKS_STALLED = 5     # ticks the leader runs with its entry appended and not durable


def run_stalled_leader(tmp_path: Path, *failpoints: str) -> tuple[int, int, int]:
    """(commit index while the writer was held, durable index then, the entry's index)."""
    spec = cluster_spec(tmp_path, n=1)[0]
    record = tmp_path / "record"
    stall = Path(f"{record}.stall")
    replica = make_replica(spec, failpoints=Failpoints.of("stall_log_writer", *failpoints,
                                                          record_path=record))
    replica.start()
    try:
        wait_until(replica.is_ready_leader, 15, "the one node leading")
        journal, obj = replica._journal, replica._obj
        assert journal is not None and obj is not None
        before = journal[-1][1]
        stall.write_text("held")
        replica.propose_blob(replica.encode_batch([submit("own-durable")]))
        wait_until(lambda: journal.stalled and journal[-1][1] > before, 10,
                   "the entry appended and the writer held")
        ticks: list[int] = []
        obj.addOnTickCallback(lambda: ticks.append(1))
        wait_until(lambda: len(ticks) >= TICKS_STALLED, 10, "the leader ticking meanwhile")
        committed, durable, appended = obj.raftCommitIndex, journal.durable_idx, journal[-1][1]
        stall.unlink()
        wait_until(lambda: min(obj.raftCommitIndex, journal.durable_idx) >= appended, 10,
                   "the entry durable and committed once the writer goes on")
        return committed, durable, appended
    finally:
        stall.unlink(missing_ok=True)
        replica.stop()


def test_a_leader_commits_nothing_its_own_disk_does_not_hold(tmp_path):
    committed, durable, appended = run_stalled_leader(tmp_path)
    assert durable < appended             # the writer was really held
    assert committed <= durable           # OWN_DURABLE_COMMIT


def test_counting_unsynced_entries_is_detected(tmp_path):
    committed, durable, appended = run_stalled_leader(tmp_path, "count_unsynced_entries")
    assert durable < appended
    assert committed > durable            # committed what no disk held
