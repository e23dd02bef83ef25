"""Three real Replicas on loopback ports, in this process: election, replication, restart
recovery from LMDB (also after compaction), request_id dedup, and the Raft port guards."""
from __future__ import annotations

import dataclasses
import pickle
import socket
import struct
import zlib

import pytest

from tests.harness.raft_options import FAST
from tests.harness.waits import wait_until
from tests.integration.raft_support import (cluster_spec, leader_of, make_replica, mini_kit,
                                            propose_sync, submit)
from tsched.node.raft.replica import Replica
from tsched.node.raft.security import RaftSecurityError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def trio(tmp_path):
    specs = cluster_spec(tmp_path)
    replicas = [make_replica(s) for s in specs]
    for r in replicas:
        r.start()
    box = {"specs": specs, "replicas": replicas}
    yield box
    for r in box["replicas"]:
        if r is not None:
            r.stop()


def applied_everywhere(replicas, task_ids):
    def check():
        for r in replicas:
            with r.read() as sm:
                if not set(task_ids) <= set(sm.tasks):
                    return False
        return True
    return check


def digests_equal(replicas):
    def check():
        seen = {(r.applied_seq, r.digest()) for r in replicas}
        return len(seen) == 1
    return check


def test_election_and_a_follower_proposal_applies_everywhere(trio):
    replicas = trio["replicas"]
    leader = wait_until(lambda: leader_of(replicas), 15, "a ready leader")
    # Ready takes one follower's vote and ack; the other learns the leader from its next
    # append, a tick later.
    wait_until(lambda: all(r.leader_id() == leader.self_id for r in replicas), 10,
               "every replica naming the leader")
    follower = next(r for r in replicas if r is not leader)
    assert not follower.is_ready_leader()
    propose_sync(follower, [submit("a1"), submit("a2")])
    wait_until(applied_everywhere(replicas, ["a1", "a2"]), 10, "a1, a2 on every replica")
    wait_until(digests_equal(replicas), 10, "equal digests at equal seq")
    st = follower.status()
    assert st["role"] == "follower" and st["leader"] == leader.self_id
    assert all(p["reachable"] for p in st["peers"].values())
    assert st["applied_seq"] == follower.applied_seq >= 2   # the barrier and our batch


def test_transfer_leadership_to_a_named_follower(trio):
    replicas = trio["replicas"]
    leader = wait_until(lambda: leader_of(replicas), 15, "a ready leader")
    target = next(r for r in replicas if r is not leader)
    with pytest.raises(ValueError):
        leader.transfer_leadership("nope")
    leader.transfer_leadership(target.self_id)
    wait_until(lambda: leader_of(replicas) is target, 10, "the named follower to lead")
    assert target.status()["ready"] and target.term > 0
    propose_sync(target, [submit("after-transfer")])


def test_request_id_dedup_of_a_reproposed_batch(trio):
    replicas = trio["replicas"]
    leader = wait_until(lambda: leader_of(replicas), 15, "a ready leader")
    batch = [submit("d1"), submit("d2")]
    propose_sync(leader, batch)
    seq = leader.applied_seq
    propose_sync(replicas[(replicas.index(leader) + 1) % 3], batch)   # the same request_ids again
    wait_until(lambda: all(r.applied_seq == seq + 1 for r in replicas), 10, "the repeat applied")
    for r in replicas:
        with r.read() as sm:
            # every request_id applied once: the repeated batch was answered from the table
            assert sm.applied_commands == len(sm.requests)
            assert {"d1", "d2"} <= set(sm.requests)
            assert sorted(sm.tasks) == ["d1", "d2"]


def stop_all(trio):
    for i, r in enumerate(trio["replicas"]):
        if r is not None:
            r.stop()
        trio["replicas"][i] = None


def restart(trio, i):
    r = make_replica(trio["specs"][i])
    r.start()
    trio["replicas"][i] = r
    return r


def test_restarted_replica_recovers_from_lmdb(trio):
    replicas = trio["replicas"]
    leader = wait_until(lambda: leader_of(replicas), 15, "a ready leader")
    victim_i = next(i for i, r in enumerate(replicas) if r is not leader)
    names = [f"r{i}" for i in range(20)]
    propose_sync(leader, [submit(n) for n in names[:10]])
    propose_sync(leader, [submit(n) for n in names[10:]])
    wait_until(applied_everywhere(replicas, names), 10, "r0..r19 everywhere")
    digest = replicas[victim_i].digest()
    stop_all(trio)
    # Alone, with no peer to learn from: the LMDB log (and its commit index) is all it has.
    lone = restart(trio, victim_i)
    wait_until(applied_everywhere([lone], names), 10, "r0..r19 recovered from LMDB")
    assert lone.digest() == digest and lone.leader_id() is None
    for i in range(3):
        if i != victim_i:
            restart(trio, i)
    replicas = trio["replicas"]
    leader = wait_until(lambda: leader_of(replicas), 15, "a leader after the full restart")
    propose_sync(leader, [submit("after")])
    wait_until(applied_everywhere(replicas, names + ["after"]), 10, "after everywhere")
    wait_until(digests_equal(replicas), 10, "equal digests")


def test_restart_after_log_compaction(trio):
    replicas = trio["replicas"]
    leader = wait_until(lambda: leader_of(replicas), 15, "a ready leader")
    victim_i = next(i for i, r in enumerate(replicas) if r is not leader)
    victim = replicas[victim_i]
    for n in range(5):
        propose_sync(leader, [submit(f"c{n}")])
    wait_until(applied_everywhere(replicas, ["c4"]), 10, "c4 everywhere")
    before = victim.snapshots_written
    victim.force_snapshot()
    wait_until(lambda: victim.snapshots_written > before, 10, "a snapshot on the victim")
    wait_until(lambda: len(victim._journal) <= 3, 10, "the journal compacted")
    propose_sync(leader, [submit("after-snap")])
    names = [f"c{n}" for n in range(5)] + ["after-snap"]
    wait_until(applied_everywhere([victim], names), 10, "after-snap on the victim")
    digest = victim.digest()
    stop_all(trio)
    lone = restart(trio, victim_i)
    wait_until(applied_everywhere([lone], names), 10, "snapshot plus log tail from disk")
    assert lone.digest() == digest
    # The snapshot alone (without the log tail) would lack after-snap: the tail was used.
    for i in range(3):
        if i != victim_i:
            restart(trio, i)
    replicas = trio["replicas"]
    leader = wait_until(lambda: leader_of(replicas), 15, "a leader after the full restart")
    propose_sync(leader, [submit("later")])
    wait_until(applied_everywhere(replicas, names + ["later"]), 10, "later everywhere")
    wait_until(digests_equal(replicas), 10, "equal digests")


def test_a_lagging_replica_catches_up_by_snapshot(trio):
    replicas = trio["replicas"]
    leader = wait_until(lambda: leader_of(replicas), 15, "a ready leader")
    victim_i = next(i for i, r in enumerate(replicas) if r is not leader)
    replicas[victim_i].stop()
    replicas[victim_i] = None
    for n in range(4):
        propose_sync(leader, [submit(f"m{n}")])
    before = leader.snapshots_written
    leader.force_snapshot()
    wait_until(lambda: leader.snapshots_written > before, 10, "a snapshot on the leader")
    wait_until(lambda: len(leader._journal) <= 3, 10, "the leader's journal compacted")
    back = restart(trio, victim_i)
    wait_until(applied_everywhere([back], [f"m{n}" for n in range(4)]), 15,
               "the missed entries, installed from the leader's snapshot")
    assert back.snapshot_path.exists()
    wait_until(digests_equal(trio["replicas"]), 10, "equal digests")


def _frame(message) -> bytes:
    data = zlib.compress(pickle.dumps(message), 3)
    return struct.pack("i", len(data)) + data


def _read_frame(sock) -> object | None:
    buf = b""
    while len(buf) < 4:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        buf += chunk
    (size,) = struct.unpack("i", buf[:4])
    while len(buf) < 4 + size:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    return pickle.loads(zlib.decompress(buf[4:4 + size]))


def test_admin_messages_are_refused_and_membership_is_unchanged(trio):
    replicas = trio["replicas"]
    leader = wait_until(lambda: leader_of(replicas), 15, "a ready leader")
    host, port = leader.self_raft.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(_frame(["add", "127.0.0.1:1"]))
        assert _read_frame(s) == "FAIL refused"
        assert s.recv(1) == b""               # and the connection is closed
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(_frame(["status"]))
        status = _read_frame(s)
        assert isinstance(status, dict) and status["partner_nodes_count"] == 2
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(_frame("readonly"))          # no observers that would receive the log
        assert _read_frame(s) == "FAIL refused"
    assert {n.id for n in leader._obj.otherNodes} == set(leader.peers.values())
    propose_sync(leader, [submit("still-works")])


def test_oversized_message_is_refused(trio):
    replicas = trio["replicas"]
    leader = wait_until(lambda: leader_of(replicas), 15, "a ready leader")
    host, port = leader.self_raft.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(struct.pack("i", leader.options.message_bytes_max + 1) + b"x" * 1024)
        s.settimeout(5)
        assert s.recv(1) == b""               # disconnected without buffering the rest


def test_non_loopback_raft_address_needs_a_secret(tmp_path):
    kw = dict(self_id="n1", self_raft="10.1.2.3:7001", peers={"n2": "127.0.0.1:7002"},
              data_dir=tmp_path)
    with pytest.raises(RaftSecurityError, match="cluster.secret"):
        Replica(**kw)
    with pytest.raises(RaftSecurityError, match="cluster.secret"):
        Replica(**{**kw, "self_raft": "127.0.0.1:7001", "peers": {"n2": "node2.example:7002"}})
    Replica(**kw, secret="s3cret", machine=mini_kit())   # constructs; nothing started


def test_secret_cluster_elects_a_leader(tmp_path):
    specs = cluster_spec(tmp_path)
    opts = dataclasses.replace(FAST)
    replicas = [Replica(self_id=s["id"], self_raft=s["raft"], peers=s["peers"],
                        data_dir=tmp_path / s["id"], secret="shared", options=opts,
                        machine=mini_kit()) for s in specs]
    try:
        for r in replicas:
            r.start()
        leader = wait_until(lambda: leader_of(replicas), 20, "a ready leader")
        propose_sync(leader, [submit("enc")])
    finally:
        for r in replicas:
            r.stop()


def test_a_taken_raft_port_fails_start_and_releases_the_journal(tmp_path):
    import dataclasses as dc
    spec = cluster_spec(tmp_path)[0]
    host, port = spec["raft"].rsplit(":", 1)
    opts = dc.replace(FAST, bind_retries_max=2, bind_retry_s=0.05)
    with socket.create_server((host, int(port))):
        r = Replica(self_id=spec["id"], self_raft=spec["raft"], peers=spec["peers"],
                    data_dir=tmp_path / "n1", options=opts, machine=mini_kit())
        with pytest.raises(OSError, match="cannot bind"):
            r.start()
    again = Replica(self_id=spec["id"], self_raft=spec["raft"], peers=spec["peers"],
                    data_dir=tmp_path / "n1", options=opts, machine=mini_kit())
    again.start()                          # the LMDB environment was closed: reopens fine
    again.stop()


def test_an_undecodable_entry_is_a_no_op_everywhere(trio):
    replicas = trio["replicas"]
    leader = wait_until(lambda: leader_of(replicas), 15, "a ready leader")
    propose_sync(leader, [submit("before-junk")])
    wait_until(applied_everywhere(replicas, ["before-junk"]), 10, "before-junk everywhere")
    seqs = [r.applied_seq for r in replicas]
    leader.propose_blob(b"\xc1 not msgpack")
    propose_sync(leader, [submit("after-junk")])     # the log moves on past the junk entry
    wait_until(applied_everywhere(replicas, ["after-junk"]), 10, "after-junk everywhere")
    assert [r.applied_seq for r in replicas] == [s + 1 for s in seqs]
    wait_until(digests_equal(replicas), 10, "equal digests")
