"""The compaction policy (node/raft/compaction.py): when a replica compacts its log, with
no replica, file or clock."""
from __future__ import annotations

import pytest

from tsched.node.raft.compaction import CompactionPolicy, compaction_phase
from tsched.node.raft.options import RaftOptions

OPTS = RaftOptions(compaction_min_entries=100, compaction_min_time_s=600.0,
                   compaction_min_bytes=6_000, compaction_log_to_snapshot_ratio=1.0)


def _due(policy: CompactionPolicy, *, applied_idx=1, first_idx=1, applied_bytes=0,
         last_snapshot_bytes=0, now_s=0.0) -> bool:
    return policy.due(applied_idx=applied_idx, first_idx=first_idx, applied_bytes=applied_bytes,
                      last_snapshot_bytes=last_snapshot_bytes, now_s=now_s)


def test_phases_are_distinct_shares_below_a_half():
    ids = ["a", "b", "c"]
    phases = [compaction_phase(i, [p for p in ids if p != i]) for i in ids]
    assert phases == [0.0, 1 / 6, 2 / 6]
    assert compaction_phase("a", []) == 0.0


def test_nothing_is_due_on_a_short_young_small_log():
    policy = CompactionPolicy(OPTS, phase=0.0, now_s=10.0)
    assert not _due(policy, applied_idx=50, applied_bytes=5_999, now_s=20.0)


def test_the_byte_threshold_is_a_share_of_the_floor_or_of_the_last_snapshot():
    policy = CompactionPolicy(OPTS, phase=1 / 6, now_s=0.0)
    assert policy.bytes_threshold(0) == 5_000
    assert policy.bytes_threshold(60_000) == 50_000
    assert not _due(policy, applied_bytes=4_999)
    assert _due(policy, applied_bytes=5_000)
    assert not _due(policy, applied_bytes=49_999, last_snapshot_bytes=60_000)


@pytest.mark.parametrize("phase, first_due", [(0.0, 100), (1 / 6, 84), (2 / 6, 67)])
def test_entry_periods_are_offset_by_the_phase(phase, first_due):
    policy = CompactionPolicy(OPTS, phase=phase, now_s=0.0)
    due = [i for i in range(2, 200) if _due(policy, applied_idx=i, first_idx=1)]
    assert due[0] == first_due


def test_a_log_that_began_in_this_period_is_not_due():
    policy = CompactionPolicy(OPTS, phase=0.0, now_s=0.0)
    # pysyncobj keeps the entry before the snapshot first: 99 began period 1 (at 100).
    assert not _due(policy, applied_idx=150, first_idx=99)
    assert _due(policy, applied_idx=200, first_idx=99)


def test_age_is_due_once_per_period_and_counted_by_any_compaction():
    policy = CompactionPolicy(OPTS, phase=0.0, now_s=10.0)
    assert not _due(policy, now_s=599.0)
    assert _due(policy, now_s=600.0)
    assert not _due(policy, now_s=900.0)           # the same period: done
    assert _due(policy, applied_bytes=6_000, now_s=1_250.0)   # by size, in period 2
    assert not _due(policy, now_s=1_300.0)         # ... which counts for the age too
    assert _due(policy, now_s=1_800.0)


def test_age_periods_are_offset_by_the_phase():
    policy = CompactionPolicy(OPTS, phase=1 / 6, now_s=0.0)
    assert not _due(policy, now_s=499.0)
    assert _due(policy, now_s=500.0)
