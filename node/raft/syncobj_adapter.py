"""The one place tsched touches pysyncobj's private (name-mangled `_SyncObj__x`) internals.

pysyncobj is pinned at 0.3.17 (pyproject.toml). tsched changes a few of its behaviours
(DESIGN.md section 6) that its public API does not reach, so it reads, writes, calls and
overrides private members of `SyncObj` (and one of `Serializer`). Every such access is here,
as a small function or in `SyncObjHooks`; nothing else in the project spells a mangled name.
Upgrading pysyncobj means re-reading each name below against the new `syncobj.py`.

Read (state of a replica):
- `__raftState` (0 follower, 1 candidate, 2 leader): `raft_state`; the view, the poller,
  the stall clock, pre-vote, membership changes and the eager send all branch on it.
- `__raftLog` (our `LmdbJournal`): `raft_log`; pre-vote's log position, the follower's
  held-entry check of replication.py.
- `__otherNodes`, `__getCurrentLogIndex()`: `other_nodes`, `current_log_index`; pre-vote's
  voters, membership's view of the configuration.
- `__raftElectionDeadline`, `__newAppendEntriesTime`: `election_deadline_s`,
  `next_append_entries_at_s`; the poller sleeps until the next one.
- `__transferInProgress`: `transfer_in_progress`; a TimeoutNow election needs no pre-vote.
- `__leaderCommitIndex`, `__votedForNodeId`: `leader_commit_index`, `voted_for`; the rejoin
  gate's caught-up test and its vote for the leader it follows.
- `__raftMatchIndex`: `match_indexes`; a leader's commit index counted with its own
  durability (own_durability.py).
- `__raftNextIndex`, `__lastResponseTime`: `next_index`, `last_response_times_s` (dicts
  changed in place); stale acks (replication.py) and the stall clock's forgiveness.
- `__raftCommitIndex`, `__raftLastApplied`, `__conf`, `__commandsWaitingCommit`,
  `__getEntries()`, `__doApplyCommand()`: `unapplied_count`, `entries_from`,
  `apply_log_entry`, `appends_in_batches`; the slice-at-a-time apply (apply_budget.py).

Written or called:
- `__raftCommitIndex`, `__leaderCommitIndex`: `set_commit_index` (own_durability.py).
- `__raftElectionDeadline`: `set_election_deadline_s` (pre-vote rounds, the rejoin gate).
- `__setCurrentTerm()`, `__setState()`, `__raftLeader`: `set_current_term`, `set_state`,
  `forget_leader` (pre-vote takes a higher term; the rejoin gate records its vote).
- `__generateRaftTimeout()`: `new_election_timeout_s`.
- `__transport.send()`: `send_message` (pre-vote messages); `__transport` itself:
  `transport_of` (a follower's acknowledgements deferred until durable, transport.py).
- `__sendAppendEntries()`, `__sendNextNodeIdx()`: `send_append_entries`,
  `send_next_node_idx` (eager sends; a follower's answer to a fully held re-send).
- `__raftLastApplied += 1`: in `apply_log_entry`.
- `__serializer` and its `_Serializer__pid`: `unblock_snapshot_sending` (snapshot_writer.py).

Overridden (pysyncobj calls these on `self`, so a subclass replaces them by mangled name):
`__applyLogEntries`, `__onMessageReceived`, `__deleteEntriesFrom`, routed by `SyncObjHooks`
to `apply_committed`, `on_raft_message` and `delete_entries_from`, whose defaults here are
pysyncobj's own (`BoundedApply` and `WastelessAppendEntries` change them).

Elsewhere in raft/, and also to re-read on an upgrade: `transport.BoundedConnection`
replaces `TcpConnection`'s private framing (`_TcpConnection__...`, a subclass of that class,
on every message sent and read); `journal_hook.py` replaces `syncobj.createJournal`; the
replica uses the single-underscore `_poller`, `_onTick`, `_isLeader` and `_getLeader`.

Hot paths: these are plain functions (one call, one attribute) and the overrides are bound
to the mangled names once, when a subclass is created, so routing adds no call per message
or per tick.
"""
from __future__ import annotations

from typing import Protocol

from pysyncobj import SyncObj
from pysyncobj.node import Node
from pysyncobj.syncobj import FAIL_REASON

# pysyncobj's log entry: (command bytes, index, term).
Entry = tuple[bytes, int, int]
FOLLOWER, CANDIDATE, LEADER = 0, 1, 2     # pysyncobj's _RAFT_STATE


class RaftLog(Protocol):
    """What tsched reads of pysyncobj's log (our `LmdbJournal`, a list-like of entries)."""

    def __len__(self) -> int: ...

    def __getitem__(self, pos: int) -> Entry: ...


# --- reads ---------------------------------------------------------------------------------

def raft_state(obj: SyncObj) -> int:
    return obj._SyncObj__raftState   # type: ignore[no-any-return]


def raft_log(obj: SyncObj) -> RaftLog:
    return obj._SyncObj__raftLog   # type: ignore[no-any-return]


def other_nodes(obj: SyncObj) -> set[Node]:
    return obj._SyncObj__otherNodes   # type: ignore[no-any-return]


def current_log_index(obj: SyncObj) -> int:
    return obj._SyncObj__getCurrentLogIndex()   # type: ignore[no-any-return]


def election_deadline_s(obj: SyncObj) -> float:
    return obj._SyncObj__raftElectionDeadline   # type: ignore[no-any-return]


def next_append_entries_at_s(obj: SyncObj) -> float:
    """When a leader sends its next heartbeat (monotonic seconds)."""
    return obj._SyncObj__newAppendEntriesTime   # type: ignore[no-any-return]


def transfer_in_progress(obj: SyncObj) -> bool:
    return bool(obj._SyncObj__transferInProgress)


def leader_commit_index(obj: SyncObj) -> int:
    return obj._SyncObj__leaderCommitIndex   # type: ignore[no-any-return]


def voted_for(obj: SyncObj) -> str | None:
    return obj._SyncObj__votedForNodeId   # type: ignore[no-any-return]


def next_index(obj: SyncObj) -> dict[Node, int]:
    """A leader's next index per peer (the dict itself: changes are pysyncobj's)."""
    return obj._SyncObj__raftNextIndex   # type: ignore[no-any-return]


def last_response_times_s(obj: SyncObj) -> dict[Node, float]:
    """A leader's time of each peer's last answer (the dict itself)."""
    return obj._SyncObj__lastResponseTime   # type: ignore[no-any-return]


def match_indexes(obj: SyncObj) -> dict[Node, int]:
    """A leader's match index per peer: what each follower acknowledged holding."""
    return obj._SyncObj__raftMatchIndex   # type: ignore[no-any-return]


# --- writes and calls ----------------------------------------------------------------------

def set_election_deadline_s(obj: SyncObj, deadline_s: float) -> None:
    obj._SyncObj__raftElectionDeadline = deadline_s


def set_current_term(obj: SyncObj, term: int, voted_for_id: str | None) -> None:
    """Term and vote, both made durable by the journal (`setCurrentTerm`)."""
    obj._SyncObj__setCurrentTerm(term, voted_for_id)


def set_state(obj: SyncObj, state: int) -> None:
    """A role change, through pysyncobj (it calls `onStateChanged`)."""
    obj._SyncObj__setState(state)


def set_commit_index(obj: SyncObj, idx: int) -> None:
    """A leader's commit index lowered to what its own durability allows (own_durability.py),
    before anything up to it is applied or sent."""
    obj._SyncObj__raftCommitIndex = idx
    obj._SyncObj__leaderCommitIndex = idx


def forget_leader(obj: SyncObj) -> None:
    obj._SyncObj__raftLeader = None


def new_election_timeout_s(obj: SyncObj) -> float:
    """A fresh random election timeout, as pysyncobj draws them."""
    return obj._SyncObj__generateRaftTimeout()   # type: ignore[no-any-return]


def transport_of(obj: SyncObj) -> object:
    """The replica's `GuardedTransport` (each tick sends the acknowledgements made durable)."""
    return obj._SyncObj__transport


def send_message(obj: SyncObj, node: Node, message: dict[str, object]) -> None:
    obj._SyncObj__transport.send(node, message)


def send_append_entries(obj: SyncObj) -> None:
    obj._SyncObj__sendAppendEntries()


def send_next_node_idx(obj: SyncObj, node: Node, next_idx: int, success: bool) -> None:
    obj._SyncObj__sendNextNodeIdx(node, nextNodeIdx=next_idx, success=success)


def unblock_snapshot_sending(obj: SyncObj | None) -> None:
    """Mark pysyncobj's Serializer idle (pid 0), so it sends the published snapshot file
    to a follower that needs one (snapshot_writer.py says why)."""
    serializer = getattr(obj, "_SyncObj__serializer", None)
    if serializer is not None:
        serializer._Serializer__pid = 0


# --- applying committed entries (apply_budget.py) ------------------------------------------

def unapplied_count(obj: SyncObj) -> int:
    return obj._SyncObj__raftCommitIndex - obj._SyncObj__raftLastApplied   # type: ignore[no-any-return]


def entries_from(obj: SyncObj, count: int) -> list[Entry]:
    """Up to `count` log entries after the last applied one ([] when not in the log)."""
    return obj._SyncObj__getEntries(obj._SyncObj__raftLastApplied + 1, count)   # type: ignore[no-any-return]


def appends_in_batches(obj: SyncObj) -> bool:
    return bool(obj._SyncObj__conf.appendEntriesUseBatch)


def apply_log_entry(obj: SyncObj, entry: Entry) -> None:
    """pysyncobj's apply loop body: apply, answer the proposer's callbacks, count it
    applied. A code version switch (`SyncObjExceptionWrongVer`, never proposed here) is not
    caught: the tick fails and the watchdog stops the node, where pysyncobj logged it and
    went on to the next entry with its applied index left behind."""
    subscribers = obj._SyncObj__commandsWaitingCommit.pop(entry[1], [])
    res = obj._SyncObj__doApplyCommand(entry[0])
    for term, callback in subscribers:
        if term == entry[2]:
            callback(res, FAIL_REASON.SUCCESS)
        else:
            callback(None, FAIL_REASON.DISCARDED)
    obj._SyncObj__raftLastApplied += 1


# --- overriding pysyncobj's private methods ------------------------------------------------

class SyncObjHooks(SyncObj):   # type: ignore[misc]  # pysyncobj ships no types
    """tsched's SyncObj base: pysyncobj's private methods that tsched replaces, under
    names of their own. A subclass overrides `apply_committed` (apply committed entries;
    True: send AppendEntries now), `on_raft_message(node, message)` or
    `delete_entries_from(from_idx)` (truncate the log), and reaches pysyncobj's own
    through `super()`."""

    # The defaults are pysyncobj's own functions themselves, so `super()` reaches them
    # without a forwarding call in between (on_raft_message runs for every message).
    apply_committed = SyncObj._SyncObj__applyLogEntries
    on_raft_message = SyncObj._SyncObj__onMessageReceived
    delete_entries_from = SyncObj._SyncObj__deleteEntriesFrom

    def __init_subclass__(cls, **kwargs: object) -> None:
        # pysyncobj calls `self.__x()`, i.e. `self._SyncObj__x()`: point those names at the
        # subclass's methods once, here, rather than through a forwarding call per use.
        super().__init_subclass__(**kwargs)
        cls._SyncObj__applyLogEntries = cls.apply_committed
        cls._SyncObj__onMessageReceived = cls.on_raft_message
        cls._SyncObj__deleteEntriesFrom = cls.delete_entries_from
