"""The cluster's membership: who the members are (id, Raft and HTTP addresses), where a
node keeps it (`members.json` beside its log), and one change at a time through
pysyncobj's membership entries (DESIGN.md section 6.2).

pysyncobj's membership entry is `MEMBERSHIP` byte + pickle(['add' | 'rem', raft, node]):
the node object travels in the log, so a `DialNode` carries the member's `name` (its id)
and `http` as attributes, and every replica learns them from the entry. Snapshots carry
them too (snapshot_writer.py writes [raft, id, http] per member).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable, Collection, Iterable, NamedTuple

from pysyncobj import SyncObj
from pysyncobj.node import Node
from pysyncobj.syncobj import _COMMAND_TYPE, FAIL_REASON

from tsched.node.config import ClusterConfig, NodeConfig, internal_http
from tsched.node.raft import journal as journal_mod
from tsched.node.raft.storage_faults import fsync_dir
from tsched.node.raft.syncobj_adapter import LEADER, RaftLog, raft_state
from tsched.node.raft.transport import DialNode

MEMBERS_FILE = "members.json"
MEMBERSHIP_ENTRY = bytes([_COMMAND_TYPE.MEMBERSHIP])
_FAIL_NAMES = {v: k.lower() for k, v in vars(FAIL_REASON).items() if not k.startswith("_")}
MEMBERS_MIN = 3      # a change never leaves fewer (one failure must stay survivable)


class Member(NamedTuple):
    id: str
    raft: str
    http: str

    def to_json(self) -> dict:
        return {"id": self.id, "raft": self.raft, "http": self.http}


def members_path(data_dir: Path) -> Path:
    return Path(data_dir) / MEMBERS_FILE


def read_members(data_dir: Path) -> list[Member] | None:
    """The membership a node last recorded, or None (no file: a node that never ran, or
    one from before membership changes). Raises ValueError for an unreadable file."""
    path = members_path(data_dir)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable ({e})") from None
    try:
        return sorted(Member(str(m["id"]), str(m["raft"]), str(m["http"]))
                      for m in doc["members"])
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: malformed ({e!r})") from None


def write_members(data_dir: Path, members: Iterable[Member]) -> None:
    """Atomically and durably (temp file, fsync, rename, fsync of the directory)."""
    path = members_path(data_dir)
    tmp = path.with_name(path.name + ".tmp")
    body = json.dumps({"members": [m.to_json() for m in sorted(members)]}, indent=1)
    with open(tmp, "w") as f:
        f.write(body + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def describe(members: Iterable[Member]) -> str:
    return ", ".join(f"{m.id} (raft {m.raft}, http {m.http})" for m in sorted(members))


def is_membership_entry(command: bytes) -> bool:
    return command[:1] == MEMBERSHIP_ENTRY


def change_in_log(journal: RaftLog | None, after_idx: int) -> bool:
    """A membership entry in `journal` after index `after_idx` (not applied yet): a change
    still in progress. Reads the in-memory tail only (Raft thread)."""
    if journal is None or not len(journal):
        return False
    first = journal[0][1]
    for pos in range(max(0, after_idx + 1 - first), len(journal)):
        if is_membership_entry(journal[pos][0]):
            return True
    return False


class Effect(NamedTuple):
    """What one tick saw of the membership, swapped whole so that a reader on another
    thread gets its parts together (members_json, member_probe.py)."""

    members: tuple[Member, ...]
    settled: bool          # the change that made `members` is applied (so committed),
    #                        and the log of before the start is applied again
    applied_idx: int       # the Raft index applied: with `settled`, `members` holds there
    last_idx: int          # the log's last index: `members` holds there in this log

    @property
    def config_index(self) -> int | None:
        """A committed Raft index at which `members` is the membership, or None while a
        change is not applied (DESIGN 6.2: two answers are ordered by it)."""
        return self.applied_idx if self.settled else None


class Membership:
    """One replica's view of the membership: sampled from pysyncobj's nodes on the Raft
    thread (`refresh`), recorded in `members.json` when it changes, and read by any thread
    as `members` (a tuple swapped atomically)."""

    PENDING_FOR_S_MAX = 30.0     # a change whose answer never came is forgotten after this

    def __init__(self, data_dir: Path, self_member: Member, peers: Iterable[Member]) -> None:
        self.data_dir = Path(data_dir)
        self.self_member = self_member
        self._known: dict[str, Member] = {m.raft: m for m in [self_member, *peers]}
        self.members: tuple[Member, ...] = tuple(sorted(self._known.values()))
        self._rafts: frozenset[str] | None = None     # None: not recorded since start
        self._change_idx = 0          # the log's last index when the membership last changed
        self.settled = True           # that change is applied (committed)
        self._pending_since: float | None = None
        self.record_after_idx = 0     # replaying the log up to here: not recorded yet
        # fn(members) on the Raft thread after a change
        self.listeners: list[Callable[[tuple[Member, ...]], None]] = []
        self.effect = Effect(self.members, True, 0, 0)

    @classmethod
    def of(cls, data_dir: Path, self_id: str, self_raft: str, peers: dict[str, str],
           http_of: dict[str, str]) -> "Membership":
        return cls(data_dir, Member(self_id, self_raft, http_of.get(self_id, "")),
                   [Member(i, r, http_of.get(i, "")) for i, r in peers.items()])

    def id_by_addr(self) -> dict[str, str]:
        return {m.raft: m.id for m in self.members}

    def peers(self) -> dict[str, str]:
        return {m.id: m.raft for m in self.members if m.id != self.self_member.id}

    def by_id(self, node_id: str) -> Member | None:
        return next((m for m in self.members if m.id == node_id), None)

    def replaying(self, journal: journal_mod.LmdbJournal) -> None:
        """Record nothing before the log of before the start is applied again (what it
        commits, as far as the log goes: pysyncobj clamps a commit index past its end)."""
        self.record_after_idx = min(journal.getRaftCommitIndex(), journal.startup_last_idx)

    def learn(self, node: Node) -> None:
        """Take the id and HTTP address a pysyncobj node carries (from a log entry or a
        snapshot)."""
        name, http = getattr(node, "name", None), getattr(node, "http", None)
        if isinstance(name, str) and isinstance(http, str) and name and http:
            self._known[node.id] = Member(name, node.id, http)

    def member_of(self, raft: str) -> Member:
        return self._known.get(raft) or Member(raft, raft, "")

    def refresh(self, other_nodes: Collection[Node], applied_idx: int, last_idx: int) -> bool:
        """On the Raft thread, each tick: the members pysyncobj now has (it takes a change
        when the entry enters the log); records and announces a change (not while the log
        of before the start is replayed). `settled`: the last change is applied."""
        rafts = frozenset(n.id for n in other_nodes)
        if rafts == self._rafts or applied_idx < self.record_after_idx:
            self.settled = applied_idx >= self._change_idx
            # Replaying, the members are the latest recorded, not those at applied_idx.
            replayed = applied_idx >= self.record_after_idx
            self.effect = Effect(self.members, self.settled and replayed, applied_idx, last_idx)
            return False
        self._change_idx = last_idx if self._rafts is not None else 0
        self.settled = applied_idx >= self._change_idx
        for n in other_nodes:
            self.learn(n)
        self._rafts = rafts
        self.members = tuple(sorted([self.self_member, *(self.member_of(r) for r in rafts)]))
        self.effect = Effect(self.members, self.settled, applied_idx, last_idx)
        write_members(self.data_dir, self.members)
        for fn in self.listeners:
            fn(self.members)
        return True

    def snapshot_cluster(self, cluster: Iterable[Node]) -> list:
        """The snapshot header's members: [raft, id, http] each (snapshot_loader reads them)."""
        return sorted([n.id, self.member_of(n.id).id, self.member_of(n.id).http] for n in cluster)

    # --- one change at a time (the leader's Raft thread) ----------------------------------

    def busy(self, journal: RaftLog | None, applied_idx: int, now_s: float) -> bool:
        if self._pending_since is not None and now_s - self._pending_since > self.PENDING_FOR_S_MAX:
            self._pending_since = None
        return self._pending_since is not None or change_in_log(journal, applied_idx)

    def propose(self, obj: SyncObj | None, journal: RaftLog | None, kind: str, member: Member,
                done: Callable[[str], None]) -> None:
        """On the Raft thread: propose adding ("add") or removing ("rem") `member` if this
        node leads and no change is in progress. `done(outcome)`: "success" once committed
        and applied, "in_progress", "not_leader", or pysyncobj's failure name."""
        now = time.monotonic()
        if obj is None or raft_state(obj) != LEADER:
            return done("not_leader")
        if self.busy(journal, obj.raftLastApplied, now):
            return done("in_progress")
        self._pending_since = now

        def answered(_res: object, err: int) -> None:
            self._pending_since = None
            done("success" if err == FAIL_REASON.SUCCESS else _FAIL_NAMES.get(err, str(err)))
        node = DialNode(member.raft, None, name=member.id, http=member.http)
        change = obj.addNodeToCluster if kind == "add" else obj.removeNodeFromCluster
        change(node, callback=answered)


def at_replicas(members: Iterable[Member]) -> list[Member]:
    """A shard group's members at their replicas' internal addresses (sorted)."""
    return sorted(Member(m.id, m.raft, internal_http(m.raft)) for m in members)


def nodes_for(cfg: ClusterConfig, self_id: str, members: Iterable[Member],
              sharded: bool = False) -> tuple[NodeConfig, ...]:
    """The config's nodes for these members: a listed node as the file has it, another
    as its addresses (served over HTTPS when this node is). `sharded`: the members of a
    shard group, whose `http` is their node's public API: a replica's own internal
    address follows from its Raft address (config.internal_http)."""
    api_of = {m.id: m.http for m in members
              if sharded and m.http and m.http != internal_http(m.raft)}
    if sharded:
        members = at_replicas(members)
    by_id = {n.id: n for n in cfg.nodes}
    me = by_id.get(self_id)
    cert = me.tls_cert if me is not None else None
    out = []
    # A file that lists every member keeps its order (a shard's nodes are listed in its
    # placement order, DESIGN 13); otherwise the membership's order.
    order = {n.id: i for i, n in enumerate(cfg.nodes)}
    if all(m.id in order for m in members):
        members = sorted(members, key=lambda m: order[m.id])
    for m in members:
        n = by_id.get(m.id)
        same = n is not None and n.raft == m.raft and m.http in ("", n.http)
        if n is None or not (same or m.id == self_id):
            n = NodeConfig(id=m.id, raft=m.raft, http=m.http or m.raft, data_dir="",
                                      tls_cert=cert, api=api_of.get(m.id))
        out.append(n)
    return tuple(out)
