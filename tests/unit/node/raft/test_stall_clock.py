"""forgive_stall: a leader's own stall does not count against its peers' answers."""
from __future__ import annotations

import pytest

from tsched.node.raft.stall_clock import forgive_stall


class FakeRaft:
    def __init__(self, role: int, answered_at: dict) -> None:
        self._SyncObj__raftState = role
        self._SyncObj__lastResponseTime = dict(answered_at)


def test_a_leaders_stall_beyond_two_heartbeats_is_forgiven():
    obj = FakeRaft(2, {"a": 100.0, "b": 99.0})
    assert forgive_stall(obj, gap_s=1.5, heartbeat_s=0.1, now=101.5) == pytest.approx(1.3)
    assert obj._SyncObj__lastResponseTime == {"a": pytest.approx(101.3), "b": pytest.approx(100.3)}


def test_never_later_than_now():
    obj = FakeRaft(2, {"a": 101.0})
    forgive_stall(obj, gap_s=2.0, heartbeat_s=0.1, now=101.5)
    assert obj._SyncObj__lastResponseTime == {"a": 101.5}


@pytest.mark.parametrize("role, gap_s", [(2, 0.2), (2, 0.05), (0, 5.0), (1, 5.0)])
def test_a_normal_gap_or_a_follower_changes_nothing(role, gap_s):
    obj = FakeRaft(role, {"a": 100.0})
    assert forgive_stall(obj, gap_s=gap_s, heartbeat_s=0.1, now=105.0) == 0.0
    assert obj._SyncObj__lastResponseTime == {"a": 100.0}
