"""A sharded node's members at start-up (DESIGN.md section 6.2): the nodes its supervisor,
router and leader spreader work with, and `tsnode --join URL` on a sharded cluster.

Only where every node holds every shard (`replicas` unset, or equal to the node count):
there a node is a member of every shard group, so shard 0's membership is the cluster's
list of nodes (shard 0's Raft port is a node's base Raft port, and a shard group's
members record their node's public API). Elsewhere the file's placement stands and
membership changes are refused (409 `partial_placement`).

Each shard replica's process checks its own group's recorded membership in the same way
(raft/join_group.py: effective_config, join_shard); the supervisor checks shard 0's first, so a
file that disagrees stops the node once, with exit 2, before any shard process starts.
"""
from __future__ import annotations

import dataclasses
import ssl
import time
from pathlib import Path

from tsched.node.raft import join_group as join
from tsched.node.config import ClusterConfig, ConfigError, NodeConfig
from tsched.node.raft.membership import Member
from tsched.node.topology import shard_data_dir
from tsched.node.config import is_full_placement, shards_of

# Each try of a sharded join may wait for a change's commit in every group (10 s each, at
# once); several tries fit, for groups that elect a leader meanwhile.
SHARDED_JOIN_TIMEOUT_S = 120.0
RETRY_S = 1.0


def node_view(cfg: ClusterConfig, me: NodeConfig, join_url: str | None, token: str | None,
              ssl_context: ssl.SSLContext | None = None) -> ClusterConfig:
    """`cfg` with the nodes of the cluster's current membership (unchanged when none is
    recorded yet, or when placement is partial)."""
    if not is_full_placement(cfg):
        if join_url is not None:
            raise ConfigError("--join: a sharded cluster takes new nodes only when every node "
                              "holds every shard ([cluster] replicas unset); this file sets "
                              f"replicas = {cfg.replicas} for {len(cfg.nodes)} nodes")
        return cfg
    shard0 = Path(shard_data_dir(cfg, me, 0))
    recorded = join.recorded_members(shard0)
    if join_url is not None:
        members, where = _joined(cfg, me, join_url, token, ssl_context, recorded is not None)
    elif recorded is not None:
        members, where = as_nodes(cfg, recorded), f"the membership recorded in {shard0}"
    else:
        return cfg
    out = join.with_members(cfg, me, members, where)
    # Every node holds every shard, however many there are now (at most REPLICAS_MAX: the
    # router refuses more).
    return dataclasses.replace(out, replicas=None)


def as_nodes(cfg: ClusterConfig, shard0: list[Member]) -> list[Member]:
    """Shard 0's members at their nodes' addresses: a node the file lists at that Raft
    address keeps the file's API address (members recorded before a shard group kept the
    public API name a replica's internal one)."""
    files = {n.id: n for n in cfg.nodes}
    out = []
    for m in shard0:
        n = files.get(m.id)
        out.append(Member(m.id, m.raft, n.http if n is not None and n.raft == m.raft
                          else m.http))
    return sorted(out)


def _joined(cfg: ClusterConfig, me: NodeConfig, url: str, token: str | None,
            ssl_context: ssl.SSLContext | None,
            restarted: bool) -> tuple[list[Member], str]:
    """The nodes, from URL's router; this node added first when it is not a member yet
    (the router makes the change in every shard group)."""
    if not restarted:
        join.refuse_other_life(Path(me.data_dir))
    members = join.members_of(join.call(url, "GET", "/v1/cluster/members", None, token,
                                        ssl_context))
    if not restarted and not all(_named(me, url, s, token, ssl_context)
                                 for s in range(shards_of(cfg))):
        members = _ask_every_shard(cfg, me, url, token, ssl_context)
    return members, f"the cluster's membership at {url}"


def _ask_every_shard(cfg: ClusterConfig, me: NodeConfig, url: str, token: str | None,
                     ssl_context: ssl.SSLContext | None) -> list[Member]:
    """POST this node until every shard group names it. A group that had no leader, or did
    not answer in time, or is still committing an earlier change, is asked again (an add
    repeated where it was made answers 200). A group whose commit needs this very node (a
    member is down: the new one counts in the quorum at once) names it from the moment the
    entry is in its leader's log; this node's own start then commits it."""
    body = {"id": me.id, "raft": me.raft, "http": me.http}
    deadline = time.monotonic() + SHARDED_JOIN_TIMEOUT_S

    def every_group_names_me() -> list[Member] | None:
        if not all(_named(me, url, s, token, ssl_context) for s in range(shards_of(cfg))):
            return None
        return join.members_of(join.call(url, "GET", "/v1/cluster/members", None, token,
                                         ssl_context))
    while True:
        try:
            return join.add_or_named(url, body, token, ssl_context, every_group_names_me)
        except join.CallFailed as e:
            retry = e.status in (None, 503, 504) or e.reason == "change_in_progress"
            if not retry:
                raise
            failure: join.CallFailed = e
        if all(_named(me, url, s, token, ssl_context) for s in range(shards_of(cfg))):
            return join.members_of(join.call(url, "GET", "/v1/cluster/members", None, token,
                                             ssl_context))
        if time.monotonic() > deadline:
            raise ConfigError(f"--join: not every shard group at {url} added node {me.id} "
                              f"within {SHARDED_JOIN_TIMEOUT_S:.0f} s (the last answer: "
                              f"{failure})")
        time.sleep(RETRY_S)


def _named(me: NodeConfig, url: str, shard: int, token: str | None,
           ssl_context: ssl.SSLContext | None) -> bool:
    try:
        doc = join.call(url, "GET", f"/v1/cluster/members?shard={shard}", None, token,
                        ssl_context)
    except join.CallFailed:
        return False
    return any(m.id == me.id for m in join.members_of(doc))
