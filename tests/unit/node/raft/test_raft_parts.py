"""Pieces of node/raft/ and node/failpoints.py that need no cluster."""
from __future__ import annotations

import pytest

from tsched.node.failpoints import Failpoints
from tsched.node.raft.storage_faults import CorruptStorage
from tsched.node.raft.security import RaftSecurityError, check_raft_security
from tsched.node.raft.snapshot_file import (publish_snapshot, read_snapshot, read_snapshot_header,
                                            snapshot_tmp_path, write_snapshot)


@pytest.mark.parametrize("addr", ["127.0.0.1:1", "localhost:2", "[::1]:3", "127.9.9.9:4"])
def test_loopback_addresses_need_no_secret(addr):
    check_raft_security([addr], None)


@pytest.mark.parametrize("addr", ["10.0.0.1:1", "0.0.0.0:2", "db.internal:3", "[2001:db8::1]:4"])
def test_other_addresses_need_a_secret(addr):
    with pytest.raises(RaftSecurityError, match="cluster.secret"):
        check_raft_security(["127.0.0.1:9", addr], None)
    check_raft_security(["127.0.0.1:9", addr], "secret")


def test_snapshot_round_trip_is_published_only_by_rename(tmp_path):
    path = tmp_path / "snapshot.bin"
    raft = [[b"last", 9, 2], [b"prev", 8, 2], ["127.0.0.1:1"]]
    write_snapshot(path, raft, b"state" * 1000)
    assert not path.exists() and snapshot_tmp_path(path).exists()
    publish_snapshot(path)
    assert not snapshot_tmp_path(path).exists()
    got_raft, state = read_snapshot(path)
    assert got_raft == raft and state == b"state" * 1000
    assert read_snapshot_header(path)["raft"][1][1] == 8


def test_a_corrupt_snapshot_is_detected_naming_the_file_and_the_index(tmp_path):
    path = tmp_path / "snapshot.bin"
    write_snapshot(path, [[b"", 7, 1], [b"", 6, 1], []], b"abcdef" * 100)
    publish_snapshot(path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStorage, match=r"snapshot.bin: snapshot at log index 7: .*checksum"):
        read_snapshot(path)
    path.write_bytes(bytes(data[:-10]))
    with pytest.raises(CorruptStorage, match="truncated"):
        read_snapshot(path)
    header = bytearray(path.read_bytes())
    header[20] ^= 0x01      # inside the msgpack header, past magic, length and CRC
    path.write_bytes(bytes(header))
    with pytest.raises(CorruptStorage, match="snapshot header: checksum mismatch"):
        read_snapshot_header(path)
    with pytest.raises(CorruptStorage, match="snapshot header: checksum mismatch"):
        read_snapshot(path)
    path.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not a tsched snapshot"):
        read_snapshot(path)


def test_failpoints_from_env():
    fp = Failpoints.from_env({"TSCHED_FAILPOINTS": " crash_after_ack, skip_sync_before_send ",
                              "TSCHED_FAILPOINTS_RECORD": "/tmp/x"})
    assert fp.on("crash_after_ack") and fp.on("skip_sync_before_send")
    assert str(fp.record_path) == "/tmp/x"
    assert not Failpoints.from_env({}).on("crash_after_ack")
    with pytest.raises(ValueError, match="unknown failpoints"):
        Failpoints.from_env({"TSCHED_FAILPOINTS": "crash_after_akc"})


class _Polled:
    """What `_TimedPoller` reads of pysyncobj, and the timeouts it was polled with."""

    def __init__(self, role: int, heartbeat_in_s: float, election_in_s: float) -> None:
        from pysyncobj.monotonic import monotonic
        now = monotonic()
        self._SyncObj__raftState = role
        self._SyncObj__newAppendEntriesTime = now + heartbeat_in_s
        self._SyncObj__raftElectionDeadline = now + election_in_s
        self.timeouts: list[float] = []
        self.cut = False      # committed entries left over from a cut apply slice

    def poll(self, timeout: float) -> None:
        self.timeouts.append(timeout)


@pytest.mark.parametrize("role, heartbeat_in_s, election_in_s, low, high", [
    (2, 0.03, -5.0, 0.02, 0.03),     # a leader sleeps until its next heartbeat
    (0, 0.03, 0.06, 0.05, 0.06),     # a follower until its election deadline
    (0, 0.03, 2.0, 0.1, 0.1),        # ... but wakes at least every idle_tick_max_s
    (1, 0.03, -1.0, 0.005, 0.005),   # a deadline passed without a campaign: no spinning
])
def test_the_raft_thread_polls_until_its_next_timer(role, heartbeat_in_s, election_in_s,
                                                    low, high):
    from pysyncobj.monotonic import monotonic

    from tsched.node.raft.options import RaftOptions
    from tsched.node.raft.poller import TimedPoller
    made = monotonic()
    obj = _Polled(role, heartbeat_in_s, election_in_s)
    obj._poller = obj
    TimedPoller.install(obj, RaftOptions())
    obj._poller.poll(0.005)                      # pysyncobj's fixed autoTickPeriod
    # the timers came nearer by the time this took (a loaded machine may take a while)
    elapsed = monotonic() - made
    assert min(low, max(0.005, low - elapsed)) - 0.005 <= obj.timeouts[0] <= high


@pytest.mark.parametrize("role", [0, 1, 2])
def test_a_replica_with_entries_left_to_apply_does_not_sleep(role):
    from tsched.node.raft.options import RaftOptions
    from tsched.node.raft.poller import TimedPoller
    obj = _Polled(role, 0.03, 0.06)
    obj.cut = True
    obj._poller = obj
    TimedPoller.install(obj, RaftOptions())
    obj._poller.poll(0.005)
    assert obj.timeouts == [0.0]


def test_heartbeats_are_at_most_a_tenth_of_the_timeouts():
    from tsched.node.raft.options import RaftOptions, heartbeat_period_s
    assert heartbeat_period_s(RaftOptions()) == 0.1
    fast = RaftOptions(raft_min_timeout_s=0.05, raft_max_timeout_s=0.1,
                       leader_fallback_timeout_s=0.1)
    assert heartbeat_period_s(fast) == pytest.approx(0.005)
