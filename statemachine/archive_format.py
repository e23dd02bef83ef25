"""The audit archive's file format (DESIGN 14.3), shared by the nodes that write it
(node/ops/archiver.py) and the readers (client/archive.py: `tsctl archive search`).

Files are named by the UTC day of the Tick that evicted their tasks,
`tasks-YYYY-MM-DD.jsonl.gz`; each holds gzip members of JSON lines
`{"v": FORMAT_VERSION, "archived_at": ..., "task": {...}}`. A node that replayed its log
after a crash may have written a task twice: readers keep the last line by `task_id`.

Beside each task file, `tasks-YYYY-MM-DD.idx` finds a task by id without reading the
file's lines (INDEX_RECORD below); day files older than `[archive] keep_days` are removed
whole (`expired_files`).

Pure (no I/O, no clock): the files' reading and writing stay with their callers.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import struct
from collections.abc import Iterable
from typing import Protocol

import orjson

FORMAT_VERSION = 1
FILE_PREFIX, FILE_SUFFIX = "tasks-", ".jsonl.gz"
# The audit trail's evicted entries (DESIGN 14.6), beside the task files and in their
# format but for the record's key: `{"v": 1, "archived_at": ..., "audit": {entry}}`;
# repeats (a replayed entry) are dropped by the entry's `id`.
AUDIT_FILE_PREFIX = "audit-"
RECORD_BYTES_MAX = 16 << 20     # a line longer than any task record is corruption


DAY_MS = 86_400_000


def day_of(ms: int) -> str:
    """`YYYY-MM-DD`, the UTC day of epoch `ms`."""
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).strftime("%Y-%m-%d")


def day_start_ms(day: str) -> int:
    """Epoch ms of the start (UTC) of `YYYY-MM-DD`; ValueError when it is not one."""
    if len(day) != 10 or day[4] != "-" or day[7] != "-":
        raise ValueError(f"{day!r} is not YYYY-MM-DD")
    when = _dt.datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=_dt.timezone.utc)
    return int(when.timestamp()) * 1000


def file_name(now_ms: int, prefix: str = FILE_PREFIX) -> str:
    """The file of the UTC day of `now_ms` (the audit trail's: `prefix=AUDIT_FILE_PREFIX`)."""
    return f"{prefix}{day_of(now_ms)}{FILE_SUFFIX}"


def is_archive_file(name: str) -> bool:
    return name.startswith(FILE_PREFIX) and name.endswith(FILE_SUFFIX)


def file_day(name: str) -> str | None:
    """The day an archive file's name carries (`YYYY-MM-DD`), None for any other name."""
    if not is_archive_file(name):
        return None
    day = name[len(FILE_PREFIX):-len(FILE_SUFFIX)]
    try:
        day_start_ms(day)
    except ValueError:
        return None
    return day


def parse_record(line: bytes, lineno: int) -> dict:
    """One line's record; ValueError (naming the line) when it is not one."""
    if len(line) > RECORD_BYTES_MAX:
        raise ValueError(f"line {lineno} is over {RECORD_BYTES_MAX} bytes")
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"line {lineno}: {e}") from None
    if not (isinstance(record, dict) and isinstance(record.get("task"), dict)
            and isinstance(record["task"].get("task_id"), str)):
        raise ValueError(f"line {lineno} is not an archive record")
    return record


def parse_records(raw: bytes) -> list[dict]:
    """Every record of one file's (decompressed) bytes; ValueError (with the reason) when
    any line is bad."""
    return [parse_record(line, lineno) for lineno, line in enumerate(raw.splitlines(), 1)
            if line.strip()]


def instant_ms(text: object) -> int | None:
    """An RFC 3339 time of a record (`completed_at`) as epoch ms; None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return int(when.timestamp() * 1000)


def matches(task: dict, task_id: str | None = None, tenant: str | None = None,
            task_type: str | None = None, from_ms: int | None = None,
            to_ms: int | None = None) -> bool:
    """Whether an archived task meets a search: each given field equal, and
    `from_ms <= completed_at < to_ms` where either bound is given (a task without
    `completed_at` then never does)."""
    for key, want in (("task_id", task_id), ("tenant", tenant), ("task_type", task_type)):
        if want is not None and task.get(key) != want:
            return False
    if from_ms is None and to_ms is None:
        return True
    done = instant_ms(task.get("completed_at"))
    if done is None:
        return False
    return (from_ms is None or done >= from_ms) and (to_ms is None or done < to_ms)


def needle(field: str, value: str) -> bytes:
    """Bytes every line of a task whose `field` is `value` holds (the writer's compact
    JSON): a cheap test before a line is parsed. A line holding them may still not match."""
    return b'"' + field.encode() + b'":' + orjson.dumps(value)


def last_by_task_id(records: list[dict], by_id: dict[str, dict]) -> None:
    """Add `records` to `by_id`, a repeat of a task replacing the earlier one and taking its
    place at the end (dict order is the order of last occurrence)."""
    for record in records:
        tid = record["task"]["task_id"]
        by_id.pop(tid, None)           # re-insert: the last occurrence's place
        by_id[tid] = record


# --- the index of a task file ----------------------------------------------------------------
# `tasks-DAY.idx` beside `tasks-DAY.jsonl.gz`, written with it (node/ops/archive_index.py):
# after each gzip member the writer appends one record (key of a task id, the member's byte
# offset) per task of the member, then (INDEX_END_KEY, the member's end). The key is 8 bytes
# of BLAKE2b of the id: ids are random hex today, but old occurrence ids (`s-...`) are not,
# and a hash spreads both; a collision (2**-64 per pair) only costs reading one more member.
# Records after the last end record are a torn append and are ignored; the data file past
# the last end is not indexed (a reader scans it).
INDEX_SUFFIX = ".idx"
INDEX_RECORD = struct.Struct(">8sQ")
INDEX_END_KEY = bytes(8)


def index_name(data_name: str) -> str:
    """`tasks-DAY.idx` of `tasks-DAY.jsonl.gz`."""
    return data_name[:-len(FILE_SUFFIX)] + INDEX_SUFFIX


def index_key(task_id: str) -> bytes:
    key = hashlib.blake2b(task_id.encode(), digest_size=8).digest()
    return key if key != INDEX_END_KEY else b"\x00" * 7 + b"\x01"


def index_records(task_ids: Iterable[str], start: int, end: int) -> bytes:
    """The records of one member at bytes [start, end) holding `task_ids`."""
    pack = INDEX_RECORD.pack
    return b"".join([pack(index_key(t), start) for t in task_ids]) + pack(INDEX_END_KEY, end)


class IndexBytes(Protocol):
    """An index's bytes as its reader holds them: `bytes`, or an `mmap` of the file."""

    def __len__(self) -> int: ...

    def __getitem__(self, at: slice, /) -> bytes: ...

    def find(self, sub: bytes, start: int, end: int, /) -> int: ...


def _record(buf: IndexBytes, at: int) -> tuple[bytes, int]:
    key, offset = INDEX_RECORD.unpack(buf[at:at + INDEX_RECORD.size])
    return key, offset


def index_end(buf: IndexBytes) -> tuple[int, int]:
    """(byte offset in the data file up to which `buf` indexes it, bytes of `buf` that
    count): the last end record's. (0, 0) when there is none."""
    size = INDEX_RECORD.size
    at = len(buf) - len(buf) % size - size
    while at >= 0:
        key, offset = _record(buf, at)
        if key == INDEX_END_KEY:
            return offset, at + size
        at -= size
    return 0, 0


def index_members(buf: IndexBytes, task_id: str, used: int) -> list[int]:
    """Byte offsets of the members that may hold `task_id`, in order, from the first
    `used` bytes of `buf` (index_end's second value). `buf` may be an mmap: `find` runs
    over it in C, so a million records take milliseconds."""
    key, size, out = index_key(task_id), INDEX_RECORD.size, list[int]()
    at = buf.find(key, 0, used)
    while at >= 0:
        if at % size == 0:
            offset = _record(buf, at)[1]
            if not out or out[-1] != offset:
                out.append(offset)
            at += size
        else:
            at += 1
        at = buf.find(key, at, used)
    return out


def expired_files(names: Iterable[str], now_ms: int, keep_days: int) -> list[str]:
    """The archive files (tasks, audit and index) among `names` whose whole UTC day ended
    `keep_days` days or more before `now_ms`, sorted."""
    cutoff = now_ms - keep_days * DAY_MS
    out: list[str] = []
    for name in names:
        for prefix, suffix in ((FILE_PREFIX, FILE_SUFFIX), (AUDIT_FILE_PREFIX, FILE_SUFFIX),
                               (FILE_PREFIX, INDEX_SUFFIX)):
            if name.startswith(prefix) and name.endswith(suffix):
                try:
                    start = day_start_ms(name[len(prefix):-len(suffix)])
                except ValueError:
                    continue
                if start + DAY_MS <= cutoff:
                    out.append(name)
                break
    return sorted(out)
