"""A node that sees no leader asks its peers whether it is still a member (DESIGN 6.2).

A removed node learns of its removal from the members' refusals when it dials them
(`Replica.not_a_member_reason`), but pysyncobj has only the node with the greater Raft
address dial, and the members no longer dial a node their membership does not name: one
whose address sorts below every member's hears nothing at all. So a node that has seen no
leader for NO_LEADER_ELECTIONS of its longest election timeouts asks its last-known peers'
`GET /v1/cluster/members` (all at once, each within PEER_TIMEOUT_S; one round at a time,
rounds further and further apart, up to ROUND_EVERY_S_MAX). The newest answer of a peer
that sees a leader (the greatest `config_index`: a committed index at which its members
hold) decides: when that index is past this node's whole log and no member has this node's
id and Raft address, the cluster removed it after everything it holds, and `/readyz` says
so as the refusals do (503 `unavailable`, `details.reason = "not_a_member"`), with one
WARNING line. It only reports: nothing here touches Raft (a peer's HTTP answer is no Raft
message, and only the log changes a membership). A leader heard again clears it (a node
added back), and so does a newer answer that names the node.

With `[auth]`, a peer's members are read with a credential signed by the cluster secret
(`auth.peer_headers`); a cluster without a secret (loopback only) cannot sign one, and
its removed nodes keep answering `no_leader` there.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import NamedTuple

from aiohttp import web

from tsched.node.api.auth import peer_headers
from tsched.node.config import NodeConfig
from tsched.node.raft.membership import Member
from tsched.node.services import NODE, Node

log = logging.getLogger("tsched.node.api.member_probe")

MEMBERS_PATH = "/v1/cluster/members"
# No leader for this many of the longest election timeouts before a first round: an
# election, and a leader's first heartbeats, take less than one or two.
NO_LEADER_ELECTIONS = 3
PEER_TIMEOUT_S = 2.0        # one peer's answer; a dead peer costs a round no more
LOOK_EVERY_S = 0.5          # how often the loop looks for a leader
ROUND_EVERY_S_MAX = 60.0    # rounds back off (doubling) to one a minute
ANSWER_MEMBERS_MAX = 64     # a peer's answer with more members is not taken (at most 9)


class Answer(NamedTuple):
    """One peer's usable answer: it sees a leader and its members are settled."""

    peer: str
    leader: str
    config_index: int
    members: frozenset[tuple[str, str]]     # (id, raft) of each member


def usable(peer: str, doc: object) -> Answer | None:
    """`doc` (a peer's members answer) when it sees a leader and names a config_index."""
    if not isinstance(doc, dict):
        return None
    leader, index, members = doc.get("leader"), doc.get("config_index"), doc.get("members")
    if not isinstance(leader, str) or not leader or isinstance(index, bool) \
            or not isinstance(index, int) or not isinstance(members, list) \
            or len(members) > ANSWER_MEMBERS_MAX:
        return None
    named = frozenset((str(m.get("id")), str(m.get("raft"))) for m in members
                      if isinstance(m, dict))
    return Answer(peer, leader, index, named)


def verdict(me: Member, own_last_idx: int, answers: Sequence[Answer]) -> str | None | bool:
    """The newest answer's word on this node: the evidence that it was removed (a str);
    False when it names this node (a member); None when no answer is newer than this
    node's log (or none came)."""
    newest = max(answers, key=lambda a: a.config_index, default=None)
    if newest is None or newest.config_index <= own_last_idx:
        return None
    if (me.id, me.raft) in newest.members:
        return False
    ids = ", ".join(sorted(str(i) for i, _ in newest.members))
    return (f"{newest.peer} (whose leader is {newest.leader}) lists the members {ids} at "
            f"Raft index {newest.config_index}, past this node's log ({own_last_idx})")


class MemberProbe:
    """The probe of one node (started and stopped with its app: `setup`)."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self.reason: str | None = None       # the evidence while the peers say it was removed
        self.rounds = 0
        self._leaderless_since: float | None = None
        self._next_round_at = 0.0
        self._every_s = 0.0

    def removed_reason(self) -> str | None:
        """What /readyz says of this node's removal; only while it sees no leader."""
        if self.reason is None or self._node.replica.leader_id() is not None:
            return None
        return (f"this node is not a member of the cluster: {self.reason}: it was removed; a "
                "removed node cannot rejoin with its old data: start a new node with an empty "
                "data dir and --join")

    async def run(self) -> None:
        while True:
            await asyncio.sleep(LOOK_EVERY_S)
            await self.step(time.monotonic())

    async def step(self, now_s: float) -> None:
        """Look for a leader; when none was seen for long enough, ask the peers (the round
        is awaited here: one at a time)."""
        if self._node.replica.leader_id() is not None:
            self._heard_leader()
            return
        if self._leaderless_since is None:
            self._leaderless_since = now_s
        patience_s = NO_LEADER_ELECTIONS * self._node.replica.options.raft_max_timeout_s
        if now_s - self._leaderless_since < patience_s or now_s < self._next_round_at:
            return
        self._every_s = min(max(2 * self._every_s, patience_s), ROUND_EVERY_S_MAX)
        self._next_round_at = now_s + self._every_s     # from this round's start
        await self.round()

    async def round(self) -> None:
        node = self._node
        peers = [n for n in node.config.nodes if n.id != node.node_id]
        own_last_idx = node.replica.membership.effect.last_idx
        docs = await asyncio.gather(*(self._ask(p) for p in peers))
        self.rounds += 1
        answers = [a for a in (usable(p.id, d) for p, d in zip(peers, docs)) if a is not None]
        said = verdict(node.replica.membership.self_member, own_last_idx, answers)
        if said is not None and node.replica.leader_id() is None:
            self._settle(said if isinstance(said, str) else None)

    async def _ask(self, peer: NodeConfig) -> object:
        node = self._node
        if node.forwarder is None:
            return None
        headers = peer_headers(node.config, node.node_id, node.clock.now_ms(), MEMBERS_PATH)
        return await node.forwarder.get_json(peer.url + MEMBERS_PATH, PEER_TIMEOUT_S, headers)

    def _settle(self, reason: str | None) -> None:
        if reason is not None and self.reason is None:
            log.warning("event=removed_from_cluster node=%s the cluster removed this node: %s, "
                        "without it. It serves nothing (/readyz: 503 not_a_member): stop it "
                        "and wipe its data dir; to bring it back, start it with an empty data "
                        "dir and --join (docs/operations.md 7.1)", self._node.node_id, reason)
        elif reason is None and self.reason is not None:
            log.info("event=member_again node=%s a peer names this node a member again",
                     self._node.node_id)
        self.reason = reason

    def _heard_leader(self) -> None:
        if self.reason is not None:
            log.info("event=member_again node=%s this node hears from a leader again",
                     self._node.node_id)
        self.reason = None
        self._leaderless_since = None
        self._every_s = 0.0
        self._next_round_at = 0.0


MEMBER_PROBE = web.AppKey("member_probe", MemberProbe)


def setup(app: web.Application) -> None:
    """The node's probe, run from its app's start to its end (after the forwarder starts:
    register this after the services' context)."""
    app[MEMBER_PROBE] = MemberProbe(app[NODE])
    app.cleanup_ctx.append(_running)


async def _running(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.get_running_loop().create_task(app[MEMBER_PROBE].run())
    yield
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


def removed_reason(app: web.Application) -> str | None:
    """The probe's reason for /readyz, or None (no probe in this app, or not removed)."""
    probe = app.get(MEMBER_PROBE)
    return probe.removed_reason() if probe is not None else None
