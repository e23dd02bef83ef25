"""node/raft/replication.py: AppendEntries handling that neither re-sends nor rewrites held entries."""
from tsched.node.raft.replication import (ReplicationStats, next_index_after_success,
                                     trim_append_entries)


def log_of(*terms):
    """A follower log with entries 1..n of the given terms (plus pysyncobj's entry 0)."""
    entries = [(b"", 0, 0)] + [(b"c%d" % i, i, t) for i, t in enumerate(terms, start=1)]

    def entry_at(idx):
        return entries[idx] if 0 <= idx < len(entries) else None

    return entry_at, len(terms)


def append(prev_idx, prev_term, entries, commit=0):
    return {"type": "append_entries", "term": 2, "commit_index": commit,
            "prevLogIdx": prev_idx, "prevLogTerm": prev_term,
            "entries": [(b"c%d" % i, i, t) for i, t in entries]}


def test_a_resend_of_held_entries_is_answered_without_touching_the_log():
    entry_at, last = log_of(1, 1, 2, 2, 2)
    got = trim_append_entries(append(2, 1, [(3, 2), (4, 2)], commit=5), entry_at, last)
    assert "prevLogIdx" not in got.message and "entries" not in got.message
    assert got.reply_next_idx == 5 and got.held == 2
    # Entry 5 is held but this message does not vouch for it: commit only up to 4.
    assert got.message["commit_index"] == 4


def test_a_heartbeat_from_behind_the_log_end_keeps_the_later_entries():
    entry_at, last = log_of(1, 1, 2)
    got = trim_append_entries(append(1, 1, [], commit=3), entry_at, last)
    assert got.reply_next_idx == 2 and "prevLogIdx" not in got.message
    assert got.message["commit_index"] == 1


def test_held_entries_are_dropped_from_the_front_up_to_the_first_new_one():
    entry_at, last = log_of(1, 1, 2)
    got = trim_append_entries(append(1, 1, [(2, 1), (3, 2), (4, 2)]), entry_at, last)
    assert got.reply_next_idx is None and got.held == 2
    assert (got.message["prevLogIdx"], got.message["prevLogTerm"]) == (3, 2)
    assert [e[1] for e in got.message["entries"]] == [4]


def test_a_real_term_conflict_is_left_for_pysyncobj_to_truncate_from_there():
    entry_at, last = log_of(1, 1, 1, 1)
    got = trim_append_entries(append(1, 1, [(2, 1), (3, 3)]), entry_at, last)
    assert got.reply_next_idx is None and got.held == 1
    assert (got.message["prevLogIdx"], [e[1] for e in got.message["entries"]]) == (2, [3])


def test_messages_it_cannot_vouch_for_pass_unchanged():
    entry_at, last = log_of(1, 1)
    for msg in (append(3, 1, [(4, 1)]),            # prev beyond the log: pysyncobj resets
                append(2, 5, [(3, 5)]),            # prev term differs: pysyncobj resets
                append(2, 1, [(3, 1)]),            # plain new entries
                append(2, 1, [])):                 # a heartbeat at the log end
        got = trim_append_entries(msg, entry_at, last)
        assert got.message is msg and got.reply_next_idx is None and got.held == 0


def test_a_stale_success_reply_never_moves_the_next_index_back():
    assert next_index_after_success(21, 11) == 21
    assert next_index_after_success(11, 21) == 21
    assert next_index_after_success(None, 11) == 11


def test_resent_entries_are_counted_per_peer_and_per_leadership():
    stats = ReplicationStats()
    e = [(b"", i, 1) for i in range(1, 11)]
    stats.on_sent("a", e[0:5])
    stats.on_sent("b", e[0:5])
    stats.on_sent("a", e[5:10])
    assert stats.resent_entries == 0
    stats.on_sent("a", e[3:7])            # 4..7 again
    assert stats.resent_entries == 4
    stats.on_leadership()
    stats.on_sent("a", e[0:2])
    assert stats.resent_entries == 4
