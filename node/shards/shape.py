"""The shape of a sharded cluster (DESIGN.md section 13): how many shards and replicas it
may have, which nodes hold each shard, and how far apart a node's shard ports are.

Pure arithmetic over a configuration, importing nothing of the node: config.py checks a
file's shape with it, and shards/layout.py builds its addresses and folders on it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tsched.node.config import ClusterConfig, NodeConfig

SHARDS_MAX = 64
REPLICA_CHOICES = (3, 5)
REPLICAS_MAX = 5
# Shard s of a node listens on its base Raft port + 100 * s, so nodes of one host with
# consecutive base ports never collide; its internal HTTP API (routers reach it there) is
# 50 above that Raft port.
SHARD_PORT_STEP = 100
SHARD_HTTP_OFFSET = 50
PORT_MAX = 65535


def internal_http(shard_raft: str) -> str:
    """A shard replica's internal HTTP address, from its Raft address (always 50 above)."""
    host, _, port = shard_raft.rpartition(":")
    return f"{host}:{int(port) + SHARD_HTTP_OFFSET}"


def is_full_placement(cfg: ClusterConfig) -> bool:
    """Every node holds every shard: the layout whose nodes can change while it runs."""
    return replicas_of(cfg) == len(cfg.nodes)


def replicas_of(cfg: ClusterConfig) -> int:
    """R: the configured value, else the number of nodes (at most 5 when there are several
    shards; a single group keeps every node, as before shards)."""
    r = getattr(cfg, "replicas", None)
    if r is not None:
        return r
    n = len(cfg.nodes)
    return n if shards_of(cfg) == 1 else min(n, REPLICAS_MAX)


def shards_of(cfg: ClusterConfig) -> int:
    return getattr(cfg, "shards", 1) or 1


def is_single_group(cfg: ClusterConfig) -> bool:
    """One shard on every node: the node is today's node, with no supervisor or router
    in front of it (no extra process hop on the hot path)."""
    return shards_of(cfg) == 1 and replicas_of(cfg) == len(cfg.nodes)


def placement(cfg: ClusterConfig, shard: int) -> tuple[NodeConfig, ...]:
    """The R nodes of `shard`: in config order from node `shard mod N`, wrapping."""
    n = len(cfg.nodes)
    return tuple(cfg.nodes[(shard + i) % n] for i in range(replicas_of(cfg)))
