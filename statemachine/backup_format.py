"""The backup file format (DESIGN 6.1), shared by `tsctl backup` (client/backup.py), which
writes it, and `tsnode --restore` (node/restore.py), which checks and reads it.

    magic  b"TSCHBKUP"                      8 bytes
    format version                          u32, big-endian (FORMAT_VERSION)
    head length                             u32, big-endian (at most HEAD_BYTES_MAX)
    head                                    JSON: cluster, shards, created_at, sections
    sections                                each shard's snapshot file, in shard order
    SHA-256                                 32 bytes, over every byte before it

A section is the snapshot file its shard's leader wrote (`TSCHSNP2`, with its own
CRC32C): the head names its shard, byte count, Raft index and term.

Pure (no I/O, no clock): callers read and write the files and feed the hash.
"""
from __future__ import annotations

import hashlib
import struct

import orjson

MAGIC = b"TSCHBKUP"
FORMAT_VERSION = 1
HEAD_BYTES_MAX = 1 << 20
TRAILER_BYTES = 32               # SHA-256
_U32 = struct.Struct(">I")
PREFIX_BYTES = len(MAGIC) + 2 * _U32.size
SHARDS_MAX = 64
_HEAD_KEYS = ("cluster", "shards", "created_at", "created_ms", "sections")
_SECTION_KEYS = ("shard", "bytes", "raft_index", "raft_term")


class BackupFormatError(ValueError):
    """A file that is not a backup this build can read. `reason`: "not_a_backup",
    "format_version", "checksum", "head" or "truncated"."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def new_hash() -> hashlib._Hash:
    return hashlib.sha256()


def encode_prefix(head: dict) -> bytes:
    """Magic, version, head length and head: what precedes the sections."""
    check_head(head)
    raw = orjson.dumps(head)
    if len(raw) > HEAD_BYTES_MAX:
        raise BackupFormatError("head", f"head of {len(raw)} bytes is over {HEAD_BYTES_MAX}")
    return MAGIC + _U32.pack(FORMAT_VERSION) + _U32.pack(len(raw)) + raw


def parse_prefix(start: bytes) -> tuple[int, int]:
    """(format version, head length) from the file's first PREFIX_BYTES bytes. Refuses a
    file that is not a backup, or a version this build does not know."""
    if len(start) < PREFIX_BYTES or not start.startswith(MAGIC):
        raise BackupFormatError("not_a_backup", "not a tsched backup file (no TSCHBKUP magic)")
    (version,) = _U32.unpack_from(start, len(MAGIC))
    if version != FORMAT_VERSION:
        raise BackupFormatError("format_version", f"backup format version {version} is "
                                f"unknown to this build (it reads version {FORMAT_VERSION})")
    (size,) = _U32.unpack_from(start, len(MAGIC) + _U32.size)
    if size > HEAD_BYTES_MAX:
        raise BackupFormatError("head", f"head length {size} is over {HEAD_BYTES_MAX}")
    return version, size


def parse_head(raw: bytes) -> dict:
    try:
        head = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BackupFormatError("head", f"head is not JSON: {exc}") from None
    check_head(head)
    return head


def check_head(head: object) -> None:
    """The head's shape: its keys, one section per shard in order, sizes that are ints."""
    if not isinstance(head, dict) or sorted(head) != sorted(_HEAD_KEYS):
        raise BackupFormatError("head", f"head must have exactly the keys {list(_HEAD_KEYS)}")
    shards, sections = head["shards"], head["sections"]
    if not isinstance(head["cluster"], str) or not isinstance(head["created_at"], str):
        raise BackupFormatError("head", "cluster and created_at must be strings")
    if not _is_int(shards) or not 1 <= shards <= SHARDS_MAX or not _is_int(head["created_ms"]):
        raise BackupFormatError("head", f"shards must be 1..{SHARDS_MAX}, created_ms an int")
    if not isinstance(sections, list) or len(sections) != shards:
        raise BackupFormatError("head", f"{shards} shards need {shards} sections")
    for s, sec in enumerate(sections):
        if not isinstance(sec, dict) or sorted(sec) != sorted(_SECTION_KEYS) or not all(
                _is_int(sec[k]) and sec[k] >= 0 for k in _SECTION_KEYS) or sec["shard"] != s:
            raise BackupFormatError("head", f"section {s} must be {list(_SECTION_KEYS)} "
                                    f"(non-negative ints) for shard {s}")


def content_bytes(prefix_len: int, head: dict) -> int:
    """How many bytes the trailer's hash covers: the prefix and every section."""
    return prefix_len + sum(sec["bytes"] for sec in head["sections"])


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
