"""The LMDB Raft journal: pysyncobj's Journal contract, durability and group commit."""
from __future__ import annotations

import struct

import lmdb
import msgpack
import pytest

from tsched.node.raft.journal import LmdbJournal, read_entries
from tsched.node.raft.storage_faults import CorruptStorage


def entries(n, start=1, term=1):
    return [(b"cmd-%d" % i, i, term) for i in range(start, start + n)]


@pytest.fixture
def path(tmp_path):
    return tmp_path / "log"


def test_append_read_and_reopen(path):
    j = LmdbJournal(path)
    for e in entries(5):
        j.add(*e)
    assert len(j) == 5 and j[0] == (b"cmd-1", 1, 1) and j[-1][1] == 5
    assert j[1:3] == entries(2, start=2)
    j.sync()
    j.close()
    assert read_entries(path) == entries(5)


def test_entries_are_buffered_until_sync_then_written_in_one_transaction(path):
    j = LmdbJournal(path)
    for e in entries(3):
        j.add(*e)
    # A read transaction sees only committed data: nothing before the group commit.
    env = j._env
    db = env.open_db(b"log")

    def durable_count():
        with env.begin(db=db) as txn:
            return txn.stat(db)["entries"]

    assert durable_count() == 0
    syncs = j.syncs
    for e in entries(4, start=4):
        j.add(*e)
    j.sync()
    assert j.syncs == syncs + 1
    assert durable_count() == 7
    j.sync()  # nothing new: no transaction
    assert j.syncs == syncs + 1
    j.close()


def test_unsynced_entries_are_lost_by_a_crash(path):
    j = LmdbJournal(path)
    for e in entries(2):
        j.add(*e)
    j.sync()
    j.add(b"late", 3, 1)
    # Simulate a crash: drop the environment without the sync that close() does.
    j._env.close()
    j._env = None
    assert read_entries(path) == entries(2)


def test_truncate_on_conflict_then_append(path):
    j = LmdbJournal(path)
    for e in entries(6):
        j.add(*e)
    j.sync()
    j.deleteEntriesFrom(3)          # keep positions 0..2 (idx 1..3)
    j.add(b"new-4", 4, 2)
    assert [e[1] for e in j[:]] == [1, 2, 3, 4] and j[-1] == (b"new-4", 4, 2)
    j.close()
    assert read_entries(path) == entries(3) + [(b"new-4", 4, 2)]


def test_truncate_without_append(path):
    j = LmdbJournal(path)
    for e in entries(6):
        j.add(*e)
    j.sync()
    j.deleteEntriesFrom(2)
    j.close()
    assert read_entries(path) == entries(2)


def test_compaction_deletes_from_the_front(path):
    j = LmdbJournal(path)
    for e in entries(10):
        j.add(*e)
    j.sync()
    j.deleteEntriesTo(7)            # pysyncobj keeps the entries from position 7 on
    for e in entries(2, start=11):
        j.add(*e)
    assert [e[1] for e in j[:]] == [8, 9, 10, 11, 12]
    j.close()
    assert read_entries(path) == entries(5, start=8)


def test_clear_then_add_replaces_everything(path):
    j = LmdbJournal(path)
    for e in entries(5):
        j.add(*e)
    j.sync()
    j.clear()
    j.add(b"snap-prev", 40, 3)
    j.add(b"snap-last", 41, 3)
    j.close()
    assert read_entries(path) == [(b"snap-prev", 40, 3), (b"snap-last", 41, 3)]


def test_trim_front_on_open(path):
    j = LmdbJournal(path)
    for e in entries(10):
        j.add(*e)
    j.close()
    j = LmdbJournal(path, trim_before_idx=6)
    assert j[0][1] == 6 and len(j) == 5
    j.close()
    assert read_entries(path) == entries(5, start=6)


def test_term_and_vote_are_durable_at_once(path):
    j = LmdbJournal(path)
    assert (j.getCurrentTerm(), j.getVotedForNodeId(), j.getRaftCommitIndex()) == (0, None, 1)
    j.setCurrentTerm(7, "127.0.0.1:9001")
    # Crash without any further sync: the vote must survive.
    j._env.close()
    j._env = None
    j = LmdbJournal(path)
    assert (j.getCurrentTerm(), j.getVotedForNodeId()) == (7, "127.0.0.1:9001")
    j.setRaftCommitIndex(5)
    j.close()
    assert LmdbJournal(path).getRaftCommitIndex() == 5


def test_map_grows_when_full(path):
    j = LmdbJournal(path, map_size_bytes=1 << 20)
    big = b"x" * 100_000
    for i in range(1, 31):           # ~3 MB through a 1 MiB map
        j.add(big, i, 1)
        j.sync()
    j.close()
    got = read_entries(path)
    assert len(got) == 30 and all(e[0] == big for e in got)


def test_truncation_keeps_committed_entries_and_skips_their_resends(path):
    j = LmdbJournal(path)
    for e in entries(10):
        j.add(*e)
    j.setRaftCommitIndex(8)
    j.deleteEntriesFrom(4)                  # pysyncobj: everything after prevLogIdx 4
    assert [e[1] for e in j[:]] == list(range(1, 9))   # 9, 10 (uncommitted) are gone
    for e in entries(4, start=5):           # the leader re-sends 5..8: identical, skipped
        j.add(*e)
    j.add(b"new-9", 9, 2)
    assert [e[1] for e in j[:]] == list(range(1, 10)) and j[-1] == (b"new-9", 9, 2)
    j.close()
    assert read_entries(path) == entries(8) + [(b"new-9", 9, 2)]


def test_a_conflicting_resend_still_truncates(path):
    j = LmdbJournal(path)
    for e in entries(6):
        j.add(*e)
    j.setRaftCommitIndex(5)
    j.deleteEntriesFrom(2)
    j.add(b"other-4", 4, 7)                 # cannot happen under Raft; handled, not hidden
    assert [e[1] for e in j[:]] == [1, 2, 3, 4] and j[-1] == (b"other-4", 4, 7)
    j.close()


def held(j):
    return sum(len(e[0]) for e in j[:])


def test_bytes_held_follows_every_change_and_survives_reopen(path):
    j = LmdbJournal(path)
    for e in entries(10):
        j.add(*e)
    assert j.bytes_held == held(j) == 5 * 9 + 6
    j.deleteEntriesTo(3)                 # compaction
    assert j.bytes_held == held(j)
    j.deleteEntriesFrom(5)               # a follower truncating an uncommitted suffix
    assert j.bytes_held == held(j) and len(j) == 5
    j.add(b"x" * 100, 9, 2)
    assert j.bytes_held == held(j)
    j.close()
    again = LmdbJournal(path)
    assert again.bytes_held == held(again) > 100
    again.clear()
    assert again.bytes_held == 0
    again.close()


def test_applied_bytes_counts_only_entries_up_to_the_applied_index(path):
    j = LmdbJournal(path)
    for e in entries(10):
        j.add(*e)
    assert j.applied_bytes(10) == held(j)
    assert j.applied_bytes(7) == held(j) - 16       # entries 8, 9, 10 are not applied
    assert j.applied_bytes(0) == 0
    # A node far behind (more unapplied entries than it scans) compacts later.
    assert j.applied_bytes(2, scan_max=4) == 0
    j.close()


def _flip_in_file(file, needle: bytes) -> None:
    """Flip a bit in every copy of `needle` (LMDB's copy-on-write leaves old pages)."""
    data = bytearray(file.read_bytes())
    at = data.find(needle)
    assert at >= 0
    while at >= 0:
        data[at + 1] ^= 0x20
        at = data.find(needle, at + 1)
    file.write_bytes(bytes(data))


def test_a_flipped_byte_in_an_entry_is_found_at_open_naming_the_file_and_index(path):
    j = LmdbJournal(path)
    for i in range(1, 6):
        j.add(b"entry-%d-" % i + b"x" * 40, i, 1)
    j.sync()
    j.close()
    _flip_in_file(path / "data.mdb", b"entry-3-")
    with pytest.raises(CorruptStorage, match=r"log/data.mdb: log index 3: checksum mismatch"):
        LmdbJournal(path)


def test_a_log_written_before_checksums_opens_and_is_rewritten_with_them(path):
    """Format 1 (no `format` key, values term + bytes): what older nodes left on disk."""
    env = lmdb.open(str(path), max_dbs=2, subdir=True)
    log_db, meta_db = env.open_db(b"log"), env.open_db(b"meta")
    with env.begin(write=True) as txn:
        for cmd, idx, term in entries(3):
            txn.put(struct.pack(">Q", idx), struct.pack(">Q", term) + cmd, db=log_db)
        txn.put(b"term", msgpack.packb(4), db=meta_db)
        txn.put(b"vote", msgpack.packb(None), db=meta_db)
        txn.put(b"commit", msgpack.packb(3), db=meta_db)
    env.close()
    assert read_entries(path) == entries(3)
    env = lmdb.open(str(path), max_dbs=2, subdir=True)
    meta_db = env.open_db(b"meta")
    with env.begin() as txn:
        assert msgpack.unpackb(txn.get(b"format", db=meta_db)) == 2
    env.close()
    _flip_in_file(path / "data.mdb", b"cmd-2")   # checksummed now
    with pytest.raises(CorruptStorage, match="log index 2: checksum mismatch"):
        LmdbJournal(path)


def test_a_lost_tail_is_found_at_open(path):
    """Damage that hides the last entries (acknowledged ones) fails the checksummed span."""
    j = LmdbJournal(path)
    for e in entries(5):
        j.add(*e)
    j.sync()
    j.close()
    env = lmdb.open(str(path), max_dbs=2, subdir=True)
    log_db = env.open_db(b"log")
    with env.begin(write=True) as txn:
        txn.delete(struct.pack(">Q", 5), db=log_db)
    env.close()
    with pytest.raises(CorruptStorage, match=r"log index 4: the log holds 1..4, written as 1..5"):
        LmdbJournal(path)


def test_the_log_writer_commits_in_order_and_sync_waits_for_it(tmp_path):
    """`sync_soon` hands batches to the writer thread; `durable_idx` moves once they are
    committed, `sync` returns only after every batch handed over before it, and a restart
    sees them all."""
    j = LmdbJournal(tmp_path / "log")
    woken: list[int] = []
    j.on_durable = lambda: woken.append(j.durable_idx)
    for idx in range(1, 51):
        j.add(b"c%d" % idx, idx, 1)
        if idx % 10 == 0:
            j.sync_soon()
    j.add(b"last", 51, 2)
    j.setCurrentTerm(2, "n1")             # a synchronous sync, behind the handed batches
    assert j.durable_idx == 51 and woken and woken[-1] <= 51
    j.close()
    assert [e[1] for e in read_entries(tmp_path / "log")] == list(range(1, 52))


def test_the_writer_wakes_the_raft_thread_only_when_entries_become_durable(tmp_path):
    """A commit that makes entries durable wakes the Raft thread (a leader's commit or a
    follower's acknowledgement may move); one of the meta record alone (the commit index
    moved) wakes nobody: waking for it cost every write a useless tick on every node."""
    j = LmdbJournal(tmp_path / "log")
    woken: list[int] = []
    j.on_durable = lambda: woken.append(j.durable_idx)
    for idx in (1, 2, 3):
        j.add(b"c", idx, 1)
    j.sync_soon()
    j.sync()                                 # waits for the batch handed over before it
    assert woken == [3]
    j.setRaftCommitIndex(3)
    j.sync_soon()
    j.sync()
    assert woken == [3] and j.syncs == 2     # committed, and nobody woken
    j.add(b"c", 4, 1)
    j.sync_soon()
    j.sync()
    assert woken == [3, 4]
    j.close()


def test_a_deferred_ack_leaves_only_once_its_entries_are_durable(tmp_path):
    """A follower's `next_node_idx` waits for the log writer (transport.DeferredAcks); an
    ack whose entries were truncated meanwhile, or made in an older term, is dropped."""
    from tests.harness.waits import wait_until
    from tsched.node.raft.transport import DeferredAcks

    j = LmdbJournal(tmp_path / "log")
    j.stall_path = tmp_path / "stall"
    j.stall_path.write_text("held")
    sent: list[int] = []
    acks = DeferredAcks(j, lambda node, m: sent.append(m["next_node_idx"]) or True,
                        lambda: 1)
    for idx in (1, 2):
        j.add(b"c", idx, 1)
    acks.send("leader", {"type": "next_node_idx", "next_node_idx": 3, "success": True})
    wait_until(lambda: j.stalled, 5, "the writer held")
    acks.flush()
    assert sent == [] and acks.deferred == 1            # not durable: not sent
    j.stall_path.unlink()
    wait_until(lambda: j.durable_idx >= 2, 5, "the entries durable")
    acks.flush()
    assert sent == [3]
    j.stall_path.write_text("held")
    j.add(b"c", 3, 1)
    acks.send("leader", {"type": "next_node_idx", "next_node_idx": 4, "success": True})
    j.deleteEntriesFrom(2)                              # truncated before it was durable
    acks.flush()
    assert sent == [3] and acks.dropped == 1
    j.stall_path.unlink()
    j.close()


def test_the_quorum_commit_index_counts_the_leader_at_its_durable_index():
    """own_durability.quorum_commit_index: a majority of {leader's durable index, followers'
    match indexes}, and only an entry of the current term moves it (Raft 5.4.2)."""
    from tsched.node.raft.own_durability import quorum_commit_index

    def term_at(idx: int) -> int:
        return 1 if idx <= 5 else 2

    assert quorum_commit_index(5, 9, [7, 0], term_at, 2) == 7     # leader + follower at 7
    assert quorum_commit_index(5, 6, [9, 0], term_at, 2) == 6     # the leader's disk bounds it
    assert quorum_commit_index(5, 4, [0, 0], term_at, 2) == 5     # never back
    assert quorum_commit_index(3, 9, [5, 5], term_at, 2) == 3     # an older term's entry
    assert quorum_commit_index(5, 9, [9, 9, 0, 0], term_at, 2) == 9   # 3 of 5
    assert quorum_commit_index(5, 9, [9, 0, 0, 0], term_at, 2) == 5
