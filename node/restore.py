"""`tsnode --config FILE --id ID --restore BACKUP` (DESIGN.md section 6.1): seed this node's
empty data dir from a backup made by `tsctl backup`, then start as usual.

Refused, before anything is written (RestoreRefused, exit status 2), with the reason: a
file that is not a backup, a format version this build does not know, a checksum that
does not match, another cluster's name, a data dir that is not empty. A backup of another
shard count is re-partitioned by tenant (statemachine/reshard.py) before it is seeded.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import tsched.statemachine.backup_format as fmt
from tsched.statemachine import Limits, StateMachine
from tsched.statemachine.errors import DecodeError
from tsched.statemachine.reshard import reshard

from tsched.node.config import ClusterConfig, NodeConfig
from tsched.node.raft.seed import check_section, seed
from tsched.node import topology as shards
from tsched.node.config import shards_of

READ_BYTES = 1 << 20
# A restored cluster's fencing tokens start this far above the backup's counter. The old
# cluster may have handed out tokens after the backup was taken, which the backup does not
# know; a worker of the old cluster holding one must never match a token handed out again.
# 2**40 covers over 100 days of claims at 100,000 a second after the backup, and leaves
# room for millions of restores below Limits.fencing_token_max (2**63 - 1). A constant,
# not a clock reading: every node seeds the same state from the same file.
FENCING_TOKEN_BUMP = 1 << 40


class RestoreRefused(Exception):
    """Why a backup is not restored here; nothing was written."""


def restore(cfg: ClusterConfig, me: NodeConfig, backup: str, limits: Limits | None = None) -> dict:
    """Check `backup` against this cluster and node, then seed every local replica's data
    dir from its shard's section, its fencing-token counter raised by FENCING_TOKEN_BUMP.
    The backup's head."""
    _check_empty(Path(me.data_dir))
    head, offsets = read_head(backup)
    if head["cluster"] != cfg.name:
        raise RestoreRefused(f"{backup} is a backup of cluster {head['cluster']!r}; this "
                             f"cluster file names cluster {cfg.name!r}")
    sections = _read_sections(backup, head, offsets)
    if head["shards"] != shards_of(cfg):
        sections = _reshard(backup, sections, shards_of(cfg), limits)
    seeded = [(s, sections[s][0], bump_fencing_tokens(sections[s][1], limits))
              for s in shards.local_shards(cfg, me.id)]
    for s, index, state in seeded:
        sub = shards.shard_config(cfg, s)
        seed(Path(shards.shard_data_dir(cfg, me, s)), index, state, [n.raft for n in sub.nodes])
    shards.stamp_data_dir(cfg, me, resharded_from=(
        head["shards"] if head["shards"] != shards_of(cfg) else None))
    return head


def _read_sections(backup: str, head: dict, offsets: list[int]) -> list[tuple[int, bytes]]:
    """(log index, state) of every shard's section, each checked."""
    out = []
    with open(backup, "rb") as f:
        for s, sec in enumerate(head["sections"]):
            f.seek(offsets[s])
            try:
                out.append(check_section(f.read(sec["bytes"])))
            except ValueError as exc:
                raise RestoreRefused(f"{backup}: shard {s}: {exc}") from None
    return out


def _reshard(backup: str, sections: list[tuple[int, bytes]], count: int,
             limits: Limits | None) -> list[tuple[int, bytes]]:
    """The sections re-partitioned over `count` shards by tenant, each at the highest of
    the old sections' log indexes (every node computes the same)."""
    index = max(i for i, _ in sections)
    try:
        states = reshard([st for _, st in sections], count,
                         lambda tenant: shards.shard_of_tenant(tenant, count), limits)
    except DecodeError as exc:
        raise RestoreRefused(f"{backup}: cannot re-partition {len(sections)} shard(s) into "
                             f"{count}: {exc}") from None
    return [(index, st) for st in states]


def bump_fencing_tokens(state: bytes, limits: Limits | None) -> bytes:
    """The snapshot `state` with its fencing-token counter FENCING_TOKEN_BUMP higher."""
    sm = StateMachine.restore(state, limits=limits)
    if sm.cluster_token + FENCING_TOKEN_BUMP > sm.limits.fencing_token_max:
        raise RestoreRefused("the backup's fencing-token counter is too close to its maximum "
                             "to be raised past the tokens handed out after the backup")
    sm.cluster_token += FENCING_TOKEN_BUMP
    return sm.snapshot()


def read_head(backup: str) -> tuple[dict, list[int]]:
    """The checked head of `backup` and each section's offset; RestoreRefused naming why."""
    try:
        size = os.path.getsize(backup)
        with open(backup, "rb") as f:
            start = f.read(fmt.PREFIX_BYTES)
            _, head_len = fmt.parse_prefix(start)
            raw = f.read(head_len)
            if len(raw) != head_len or size < fmt.PREFIX_BYTES + head_len + fmt.TRAILER_BYTES:
                raise fmt.BackupFormatError("truncated", "the file is truncated")
            _verify_checksum(f, start + raw, size)
            head = fmt.parse_head(raw)
    except OSError as exc:
        raise RestoreRefused(f"cannot read {backup}: {exc.strerror or exc}") from None
    except fmt.BackupFormatError as exc:
        raise RestoreRefused(f"{backup}: {exc}") from None
    if fmt.content_bytes(fmt.PREFIX_BYTES + len(raw), head) + fmt.TRAILER_BYTES != size:
        raise RestoreRefused(f"{backup}: its size does not match its head's sections")
    offsets, at = [], fmt.PREFIX_BYTES + len(raw)
    for sec in head["sections"]:
        offsets.append(at)
        at += sec["bytes"]
    return head, offsets


def _verify_checksum(f: BinaryIO, prefix: bytes, size: int) -> None:
    """The trailer's SHA-256 over every byte before it, read a megabyte at a time."""
    h = fmt.new_hash()
    h.update(prefix)
    left = size - fmt.TRAILER_BYTES - len(prefix)
    while left > 0:
        chunk = f.read(min(READ_BYTES, left))
        if not chunk:
            raise fmt.BackupFormatError("truncated", "the file is truncated")
        h.update(chunk)
        left -= len(chunk)
    if f.read(fmt.TRAILER_BYTES) != h.digest():
        raise fmt.BackupFormatError("checksum", "checksum mismatch: the file is damaged "
                                    "(its SHA-256 does not match its content)")


def _check_empty(data_dir: Path) -> None:
    if data_dir.exists() and any(data_dir.iterdir()):
        raise RestoreRefused(f"data dir {data_dir} is not empty: a restore seeds a fresh "
                             "node only (move its contents away first)")
