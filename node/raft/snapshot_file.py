"""The snapshot file format: written to a temp file, published by an atomic rename, read
back with its header and state checksums checked."""
from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import BinaryIO

import crc32c
import msgpack

from tsched.node.raft.storage_faults import CorruptStorage, fsync_dir

SNAPSHOT_MAGIC = b"TSCHSNP2"
SNAPSHOT_MAGIC_V1 = b"TSCHSNP1"     # no header checksum; SHA-256 of the state
_U32 = struct.Struct(">I")


def write_snapshot(path: Path, raft_data: list, state: bytes) -> Path:
    """Write and fsync `path`'s temp file; `publish_snapshot` renames it into place.

    Format 2: magic, header length, CRC32C of the header, header (msgpack: raft data,
    state length, CRC32C of the state), state. Format 1 (magic TSCHSNP1, a SHA-256 of the
    state and no header checksum) is still read."""
    header = msgpack.packb({"raft": raft_data, "state_len": len(state),
                            "state_crc32c": crc32c.crc32c(state)})
    tmp = snapshot_tmp_path(path)
    with open(tmp, "wb") as f:
        f.write(SNAPSHOT_MAGIC + _U32.pack(len(header)) + _U32.pack(crc32c.crc32c(header)))
        f.write(header)
        _write_synced(f, state)
        os.fsync(f.fileno())
    return tmp


# The snapshot child writes and syncs the state this much at a time. On ext4 a journal
# commit (the parent's Raft log fsync) waits for the data of blocks allocated in it: a
# state of hundreds of MB written in one piece held the log's fsync, and the heartbeats
# behind it, for as long as it took to write out (300 MB beside a loop of 4 KB fdatasyncs,
# quiet machine: those took up to 91-187 ms; synced every 8 MB, up to 16-19 ms; see also
# bench/notes/2026-12-02-raft-thread-stalls.md).
SNAPSHOT_SYNC_BYTES = 8 << 20


def _write_synced(f: BinaryIO, data: bytes) -> None:
    view = memoryview(data)
    for start in range(0, len(view), SNAPSHOT_SYNC_BYTES):
        f.write(view[start:start + SNAPSHOT_SYNC_BYTES])
        f.flush()
        os.fdatasync(f.fileno())


def snapshot_tmp_path(path: Path) -> Path:
    return path.with_name(path.name + ".fork.tmp")


def publish_snapshot(path: Path) -> None:
    """Atomic replace, then fsync the directory so that the rename itself is durable."""
    os.replace(snapshot_tmp_path(path), path)
    fsync_dir(path.parent)


def _parse_snapshot_header(path: Path, data: bytes) -> tuple[dict, int]:
    """(header, offset of the state); raises CorruptStorage naming the file."""
    magic = data[:len(SNAPSHOT_MAGIC)]
    if magic not in (SNAPSHOT_MAGIC, SNAPSHOT_MAGIC_V1):
        raise CorruptStorage(path, "snapshot header", "not a tsched snapshot")
    at = len(SNAPSHOT_MAGIC)
    try:
        (size,) = _U32.unpack_from(data, at)
        at += _U32.size
        if magic == SNAPSHOT_MAGIC:
            (crc,) = _U32.unpack_from(data, at)
            at += _U32.size
            if len(data) < at + size or crc32c.crc32c(data[at:at + size]) != crc:
                raise CorruptStorage(path, "snapshot header", "checksum mismatch")
        header = msgpack.unpackb(data[at:at + size])
        return header, at + size
    except (struct.error, ValueError, msgpack.UnpackException) as exc:
        raise CorruptStorage(path, "snapshot header", repr(exc)) from exc


def read_snapshot_header(path: Path) -> dict:
    """The header alone (a start reads it to trim the log), checked as `read_snapshot` does."""
    with open(path, "rb") as f:
        return read_open_snapshot_header(f, path)


def read_open_snapshot_header(f: BinaryIO, path: Path) -> dict:
    """The header of the snapshot file open as `f` (read from its current position)."""
    head = f.read(len(SNAPSHOT_MAGIC) + 2 * _U32.size)
    if len(head) < len(SNAPSHOT_MAGIC) + 2 * _U32.size:
        raise CorruptStorage(path, "snapshot header", "truncated")
    size = _U32.unpack_from(head, len(SNAPSHOT_MAGIC))[0]
    return _parse_snapshot_header(path, head + f.read(size))[0]


def snapshot_index(path: Path) -> int | None:
    """The index of the entry before the last one the snapshot at `path` covers (the log
    pysyncobj loads with a snapshot starts with those two entries: the journal keeps it), or
    None without a snapshot."""
    if not path.exists():
        return None
    return int(read_snapshot_header(path)["raft"][1][1])


def read_snapshot(path: Path) -> tuple[list, bytes]:
    with open(path, "rb") as f:
        data = f.read()
    header, start = _parse_snapshot_header(path, data)
    state = data[start:]
    try:
        index = header["raft"][0][1]   # the last entry it covers, as a backup names it
        intact = len(state) == header["state_len"] and (
            crc32c.crc32c(state) == header["state_crc32c"] if "state_crc32c" in header
            else hashlib.sha256(state).hexdigest() == header["state_sha256"])
    except (KeyError, IndexError, TypeError) as exc:
        raise CorruptStorage(path, "snapshot header", repr(exc)) from exc
    if not intact:
        raise CorruptStorage(path, f"snapshot at log index {index}",
                                         "truncated or checksum mismatch")
    return header["raft"], state

