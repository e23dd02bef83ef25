"""Seeding an empty data dir with a snapshot from a backup (`tsnode --restore`, DESIGN.md
section 6.1).

The backup's section is a snapshot file as a leader wrote it; it is checked (its own
CRC32C) and written again as this node's snapshot at the backup's log index, with
pysyncobj's raft data made afresh: the last two entries as no-ops of term 0 and this
cluster's nodes. Term 0, not the old cluster's term: the fresh cluster's first election
is in term 1, and a log whose entries' terms went down (an old term before entries of
term 1) would break Raft's up-to-date check. Every node seeds the same index and terms,
so every replica starts from the same state and the log continues after it.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pysyncobj.syncobj import _COMMAND_TYPE

from tsched.node.raft.storage_faults import CorruptStorage
from tsched.node.raft.snapshot_file import publish_snapshot, read_snapshot, write_snapshot

SNAPSHOT_NAME = "snapshot.bin"     # Replica.snapshot_path
_NO_OP = bytes([_COMMAND_TYPE.NO_OP])


def check_section(section: bytes) -> tuple[int, bytes]:
    """(log index, state) of a backup's section; ValueError naming what is wrong."""
    with tempfile.NamedTemporaryFile(prefix="tsched-section-") as f:
        f.write(section)
        f.flush()
        try:
            raft, state = read_snapshot(Path(f.name))
        except CorruptStorage as exc:
            raise ValueError(f"the section's snapshot is damaged: {exc}") from None
    return int(raft[0][1]), state


def seed(data_dir: Path, index: int, state: bytes, raft_addrs: list[str]) -> Path:
    """Write `state` as the snapshot of `data_dir` at log `index` (at least 2: pysyncobj's
    log starts with a no-op at index 1). Durable before it returns."""
    index = max(index, 2)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / SNAPSHOT_NAME
    raft_data = [[_NO_OP, index, 0], [_NO_OP, index - 1, 0], sorted(raft_addrs)]
    write_snapshot(path, raft_data, state)
    publish_snapshot(path)
    fd = os.open(data_dir.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path
