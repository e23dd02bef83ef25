"""Shard arithmetic: which shard a tenant or a task id belongs to, where each shard's
replicas live, their ports and data folders (DESIGN.md section 13).

Pure functions of the configuration: the supervisor, the router and the shard processes
all compute the same answers from the same `cluster.toml`. The shape itself (limits,
placement, port steps) is in config.py, which checks a file with it.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path

from tsched.node.config import (SHARD_PORT_STEP, ClusterConfig, ConfigError, NodeConfig,
                                internal_http, is_full_placement, is_single_group, placement,
                                replicas_of, shards_of, split_address)

STAMP_FILE = "shards.json"      # in a node's data_dir: the shape its data was made with
# What a data dir made by a single group (shards = 1, today's layout) holds at its top.
_SINGLE_GROUP_FILES = ("raft-log", "snapshot.bin")
SHARD_ID_HEX = 2                # a task id's first two hex digits name its shard
OCCURRENCE_ID_CHARS = 36        # `s03-` and 32 hex digits: a shard's cron occurrence


# --- routing -------------------------------------------------------------------------------

TENANT_SHARDS_CACHED_MAX = 4096


@functools.lru_cache(maxsize=TENANT_SHARDS_CACHED_MAX)
def shard_of_tenant(tenant: str, shards: int) -> int:
    # Cached: a router hashes the tenant of every item of every submit (500 per batch),
    # from a handful of tenants; the hash was 3% of a router's CPU.
    digest = hashlib.blake2b(tenant.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def shard_of_task_id(task_id: str, shards: int) -> int | None:
    """The shard a task id names: a task's in its first two hex digits, a cron occurrence's
    after its `s` (`s03-` and 32 hex digits). None when the id carries no shard (an
    occurrence made before occurrences named their shard: `s-` and 32 hex digits) and
    the shards must be asked. An id naming a shard that does not exist is `-1`."""
    if len(task_id) == OCCURRENCE_ID_CHARS and task_id[0] == "s" and task_id[3] == "-":
        head = task_id[1:1 + SHARD_ID_HEX]
    elif len(task_id) == 32:
        head = task_id[:SHARD_ID_HEX]
    else:
        return None
    if not all(ch in "0123456789abcdef" for ch in head):
        return None
    s = int(head, 16)
    return s if s < shards else -1


def task_id_in(shard: int, random_hex: str) -> str:
    """A task id of `shard`: its number in two hex digits, then 30 random ones."""
    return f"{shard:02x}{random_hex[SHARD_ID_HEX:]}"


# --- placement and addresses ---------------------------------------------------------------

def local_shards(cfg: ClusterConfig, node_id: str) -> list[int]:
    return [s for s in range(shards_of(cfg))
            if any(n.id == node_id for n in placement(cfg, s))]


def shifted(raft: str, shard: int) -> str:
    """A node's base Raft address moved to shard `shard`'s Raft port."""
    host, port = split_address(raft, "raft")
    return f"{host}:{port + SHARD_PORT_STEP * shard}"


def shard_raft(node: NodeConfig, shard: int) -> str:
    return shifted(node.raft, shard)


def shard_http(node: NodeConfig, shard: int) -> str:
    return internal_http(shard_raft(node, shard))


def shard_data_dir(cfg: ClusterConfig, node: NodeConfig, shard: int) -> str:
    if shards_of(cfg) == 1:
        return node.data_dir      # a single shard keeps today's layout: no migration
    return os.path.join(node.data_dir, f"shard-{shard}")


def shard_config(cfg: ClusterConfig, shard: int) -> ClusterConfig:
    """The single-group configuration one shard's processes run: its R nodes, each at the
    shard's Raft port, internal HTTP address and data folder."""
    nodes = tuple(dataclasses.replace(n, raft=shard_raft(n, shard), http=shard_http(n, shard),
                                      data_dir=shard_data_dir(cfg, n, shard), api=n.http)
                  for n in placement(cfg, shard))
    return dataclasses.replace(cfg, nodes=nodes, shards=1, replicas=len(nodes))


def shard_process_config(cfg: ClusterConfig, node_id: str, shard: int
                         ) -> tuple[ClusterConfig, NodeConfig]:
    """What the process of `node_id`'s replica of `shard` runs with; ConfigError when the
    node holds no replica of that shard."""
    if not 0 <= shard < shards_of(cfg):
        raise ConfigError(f"--shard {shard}: the cluster has shards 0..{shards_of(cfg) - 1}")
    sub = shard_config(cfg, shard)
    try:
        return sub, sub.node(node_id)
    except ConfigError:
        raise ConfigError(f"node {node_id} holds no replica of shard {shard}") from None


# --- the data dir's shape ------------------------------------------------------------------

def shape_of(cfg: ClusterConfig) -> dict[str, int]:
    return {"shards": shards_of(cfg), "replicas": replicas_of(cfg)}


def check_data_dir(cfg: ClusterConfig, node: NodeConfig) -> None:
    """Refuse a data dir made with other `shards`/`replicas` values (ConfigError naming
    both). Reads only: nothing is created or changed."""
    want = shape_of(cfg)
    found = recorded_shape(Path(node.data_dir), len(cfg.nodes))
    if found is None or found == want or _grown_or_shrunk(cfg, node, found):
        return
    diffs = [f"{k} = {found[k]} (the config says {k} = {want[k]})"
             for k in ("shards", "replicas") if found[k] != want[k]]
    raise ConfigError(f"node {node.id}: data dir {node.data_dir} was made with "
                      f"{' and '.join(diffs)}; these are fixed for the life of the cluster "
                      "(changing them needs a backup and a restore into a fresh data dir)")


def _grown_or_shrunk(cfg: ClusterConfig, node: NodeConfig, found: dict[str, int]) -> bool:
    """Every node holds every shard, and this one holds data of each: a membership change
    (DESIGN.md section 6.2) changed the node count, which places nothing elsewhere."""
    return (found["shards"] == shards_of(cfg) and is_full_placement(cfg)
            and all(Path(shard_data_dir(cfg, node, s)).is_dir() for s in range(shards_of(cfg))))


def recorded_shape(data_dir: Path, nodes: int) -> dict[str, int] | None:
    """The shape a data dir was made with; None when it holds no data yet."""
    stamp = data_dir / STAMP_FILE
    if stamp.exists():
        try:
            doc = json.loads(stamp.read_text())
            return {"shards": int(doc["shards"]), "replicas": int(doc["replicas"])}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{stamp}: unreadable ({e}); it records the data dir's shards "
                              "and replicas") from None
    if any((data_dir / name).exists() for name in _SINGLE_GROUP_FILES):
        return {"shards": 1, "replicas": nodes}
    return None


def stamp_data_dir(cfg: ClusterConfig, node: NodeConfig,
                   resharded_from: int | None = None) -> None:
    """Record the shape of a sharded node's data dir (a single group writes nothing: its
    layout stays as it was before shards). Written atomically, once. `resharded_from`: the
    shard count of the backup its state was re-partitioned from (DESIGN.md section 6.1)."""
    if is_single_group(cfg):
        return
    data_dir = Path(node.data_dir)
    stamp = data_dir / STAMP_FILE
    if stamp.exists():
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_suffix(".tmp")
    doc: dict = shape_of(cfg)
    if resharded_from is not None:
        doc["resharded_from"] = resharded_from
    with open(tmp, "w") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, stamp)
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def resharded_from(node: NodeConfig) -> int | None:
    """The shard count a node's state was re-partitioned from on restore; None when it
    never was (or the stamp is unreadable: check_data_dir says so)."""
    try:
        doc = json.loads((Path(node.data_dir) / STAMP_FILE).read_text())
        n = doc.get("resharded_from")
    except (OSError, ValueError, AttributeError):
        return None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


# A shard process's answers name their shard (api/shard_tag.py adds it).
SHARD_HEADER = "X-Tsched-Shard"
