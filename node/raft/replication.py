"""AppendEntries without waste: what `RaftObject` changes in pysyncobj 0.3.17's replication.

pysyncobj 0.3.17 re-sends and rewrites log entries in normal operation:
- the leader sets a follower's next index to the value of any success reply, even a stale
  one (an answer to an earlier message, when it has already sent further), so the next
  AppendEntries sends the same entries again;
- a follower that receives entries after `prevLogIdx` deletes every entry it holds after
  `prevLogIdx` and appends what came, even entries it already held with the same term
  (Raft, section 5.3, deletes only from the first entry whose term conflicts), and logs
  "truncating already-applied log entries ... may have diverged" at CRITICAL when some
  of them were applied.

The functions here decide what to do instead; they are pure (a log is seen through
`entry_at(idx) -> (command, idx, term) | None`), so tests need no cluster.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Callable, NamedTuple

from pysyncobj.node import Node

from tsched.node.raft.syncobj_adapter import (
    Entry, RaftLog, SyncObjHooks, next_index, raft_log, send_next_node_idx)

EntryAt = Callable[[int], "Entry | None"]

log = logging.getLogger(__name__)


class ReplicationStats:
    """Counters of replication waste, shown in /metrics. Written by the Raft thread only."""

    def __init__(self) -> None:
        self.resent_entries = 0        # leader: entries sent to a peer that it had sent before
        self.stale_acks = 0            # leader: success replies that would have moved next index back
        self.held_entries = 0          # follower: entries received that it already held (kept)
        self.truncations = 0           # follower: log cut back on a real term conflict
        self.truncated_entries = 0
        self._sent_max_idx: dict[Node, int] = {}  # peer -> highest entry index sent in this leadership

    def on_leadership(self) -> None:
        """A new leadership sends from the follower's reply, not from what an earlier term sent."""
        self._sent_max_idx.clear()

    def on_sent(self, peer: Node, entries: Sequence[Entry] | None) -> None:
        if not entries:
            return
        first, last = entries[0][1], entries[-1][1]
        sent = self._sent_max_idx.get(peer, 0)
        if first <= sent:
            self.resent_entries += min(last, sent) - first + 1
        if last > sent:
            self._sent_max_idx[peer] = last


def next_index_after_success(before: int | None, after: int) -> int:
    """A success reply only tells what the follower holds up to then: the next index never
    goes back below what was already sent on the same (ordered) connection. A follower that
    lost messages answers the next AppendEntries with a failure, which does reset it."""
    return after if before is None else max(before, after)


class Trimmed(NamedTuple):
    message: dict               # what pysyncobj handles
    reply_next_idx: int | None  # not None: every entry is held; answer success with this
    held: int                   # entries dropped because the follower holds them


def held_prefix(entry_at: EntryAt, entries: Sequence[Entry]) -> int:
    """How many leading `entries` the log already holds at the same index with the same term."""
    n = 0
    for entry in entries:
        held = entry_at(entry[1])
        if held is None or held[2] != entry[2]:
            break
        n += 1
    return n


def trim_append_entries(message: dict, entry_at: EntryAt, last_idx: int) -> Trimmed:
    """A follower's view of a regular AppendEntries whose `prevLogIdx` matches its log:
    entries it already holds with the same term are dropped from the front, so pysyncobj
    deletes from the first entry whose term really conflicts, or not at all.

    When every entry is held (a re-send, or a heartbeat from behind the follower's log
    end), pysyncobj must not see `prevLogIdx` at all, since it would truncate everything
    after it: the caller answers success with `reply_next_idx` itself. The commit index
    taken from the leader is capped at the last entry this message vouches for (Raft's
    "index of last new entry"): entries the follower holds beyond it are unverified."""
    if "prevLogIdx" not in message or message.get("transmission") is not None:
        return Trimmed(message, None, 0)
    prev_idx = message["prevLogIdx"]
    prev = entry_at(prev_idx)
    if prev is None or prev[2] != message["prevLogTerm"]:
        return Trimmed(message, None, 0)       # pysyncobj answers the mismatch
    entries = message.get("entries") or []
    verified = prev_idx + len(entries)
    n = held_prefix(entry_at, entries)
    if n == len(entries) and (n or last_idx > prev_idx):
        out = {k: v for k, v in message.items()
               if k not in ("prevLogIdx", "prevLogTerm", "entries")}
        out["commit_index"] = min(message["commit_index"], verified)
        return Trimmed(out, verified + 1, n)
    if n == 0:
        return Trimmed(message, None, 0)
    out = dict(message)
    out["prevLogIdx"], out["prevLogTerm"] = entries[n - 1][1], entries[n - 1][2]
    out["entries"] = entries[n:]
    return Trimmed(out, None, n)


def _entry_reader(journal: RaftLog) -> tuple[EntryAt, int]:
    """`entry_at` over pysyncobj's log (a list-like of entries with consecutive indexes)."""
    first = journal[0][1]
    size = len(journal)

    def entry_at(idx: int) -> Entry | None:
        pos = idx - first
        return journal[pos] if 0 <= pos < size else None

    return entry_at, journal[-1][1]


class WastelessAppendEntries(SyncObjHooks):
    """A mixin of `RaftObject`: replaces two of pysyncobj's private methods
    (`syncobj_adapter.SyncObjHooks` routes them here)."""

    replication: ReplicationStats

    def on_raft_message(self, node: Node, message: dict) -> None:
        kind = message.get("type")
        if kind == "append_entries" and message.get("term", -1) >= self.raftCurrentTerm:
            entry_at, last_idx = _entry_reader(raft_log(self))
            trimmed = trim_append_entries(message, entry_at, last_idx)
            self.replication.held_entries += trimmed.held
            super().on_raft_message(node, trimmed.message)
            if trimmed.reply_next_idx is not None:
                send_next_node_idx(self, node, trimmed.reply_next_idx, success=True)
            return
        if kind == "next_node_idx" and message.get("success") and not message.get("reset"):
            next_idx = next_index(self)
            before = next_idx.get(node)
            super().on_raft_message(node, message)
            after = next_idx.get(node)
            if after is not None and self._isLeader():
                kept = next_index_after_success(before, after)
                if kept != after:
                    next_idx[node] = kept
                    self.replication.stale_acks += 1
            return
        super().on_raft_message(node, message)

    def delete_entries_from(self, from_idx: int) -> None:
        """Reached only on a real term conflict now (see `trim_append_entries`)."""
        journal = raft_log(self)
        last = journal[-1][1] if len(journal) else 0
        if from_idx <= last:
            self.replication.truncations += 1
            self.replication.truncated_entries += last - from_idx + 1
            if from_idx <= self.raftLastApplied:
                log.error("raft: log entries from %d conflict in term with the leader's "
                          "although applied up to %d: this replica may have diverged",
                          from_idx, self.raftLastApplied)
        super().delete_entries_from(from_idx)
