"""The audit archive's file format (DESIGN 14.3), shared by the nodes that write it
(node/ops/archive.py) and the readers (client/archive.py: `tsctl archive search`).

Files are named by the UTC day of the Tick that evicted their tasks,
`tasks-YYYY-MM-DD.jsonl.gz`; each holds gzip members of JSON lines
`{"v": FORMAT_VERSION, "archived_at": ..., "task": {...}}`. A node that replayed its log
after a crash may have written a task twice: readers keep the last line by `task_id`.

Pure (no I/O, no clock): the files' reading and writing stay with their callers.
"""
from __future__ import annotations

import datetime as _dt

import orjson

FORMAT_VERSION = 1
FILE_PREFIX, FILE_SUFFIX = "tasks-", ".jsonl.gz"
# The audit trail's evicted entries (DESIGN 14.6), beside the task files and in their
# format but for the record's key: `{"v": 1, "archived_at": ..., "audit": {entry}}`;
# repeats (a replayed entry) are dropped by the entry's `id`.
AUDIT_FILE_PREFIX = "audit-"
RECORD_BYTES_MAX = 16 << 20     # a line longer than any task record is corruption


def file_name(now_ms: int, prefix: str = FILE_PREFIX) -> str:
    """The file of the UTC day of `now_ms` (the audit trail's: `prefix=AUDIT_FILE_PREFIX`)."""
    day = _dt.datetime.fromtimestamp(now_ms / 1000, _dt.timezone.utc).strftime("%Y-%m-%d")
    return f"{prefix}{day}{FILE_SUFFIX}"


def is_archive_file(name: str) -> bool:
    return name.startswith(FILE_PREFIX) and name.endswith(FILE_SUFFIX)


def parse_records(raw: bytes) -> list[dict]:
    """Every record of one file's (decompressed) bytes; ValueError (with the reason) when
    any line is bad."""
    out = []
    for lineno, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        if len(line) > RECORD_BYTES_MAX:
            raise ValueError(f"line {lineno} is over {RECORD_BYTES_MAX} bytes")
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise ValueError(f"line {lineno}: {e}") from None
        if not (isinstance(record, dict) and isinstance(record.get("task"), dict)
                and isinstance(record["task"].get("task_id"), str)):
            raise ValueError(f"line {lineno} is not an archive record")
        out.append(record)
    return out


def last_by_task_id(records: list[dict], by_id: dict[str, dict]) -> None:
    """Add `records` to `by_id`, a repeat of a task replacing the earlier one and taking its
    place at the end (dict order is the order of last occurrence)."""
    for record in records:
        tid = record["task"]["task_id"]
        by_id.pop(tid, None)           # re-insert: the last occurrence's place
        by_id[tid] = record
