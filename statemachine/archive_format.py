"""The audit archive's file format (DESIGN 14.3), shared by the nodes that write it
(node/ops/archiver.py) and the readers (client/archive.py: `tsctl archive search`).

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
