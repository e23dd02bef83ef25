"""Pieces of node/raft.py and node/failpoints.py that need no cluster."""
from __future__ import annotations

import pytest

from tsched.node.failpoints import Failpoints
from tsched.node.journal import CorruptStorage
from tsched.node.raft import (RaftSecurityError, check_raft_security, publish_snapshot,
                              read_snapshot, read_snapshot_header, snapshot_tmp_path,
                              write_snapshot)


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
    write_snapshot(path, [[b"", 2, 1], [b"", 7, 1], []], b"abcdef" * 100)
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
