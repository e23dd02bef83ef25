"""The audit archive (DESIGN 13.3): every task this node's replica evicts, on disk.

Writing. `Archive.on_apply` is a Replica apply listener (the Raft thread, under the replica
lock, straight after the batch is applied). A Tick that evicted tasks answers with them
(statemachine: `EvictedAnswer`); the listener appends one JSON line per task to
`DIR/tasks-YYYY-MM-DD.jsonl.gz` (the UTC day of the Tick's `now_ms`) as one gzip member,
then flushes and fsyncs the file before it returns. Raft compaction snapshots the state
after apply, so a snapshot that no longer holds a task (and the log compacted behind it)
can only exist once the task's line is on disk. A crash after the write and before the
next snapshot replays the Tick and appends the task again: readers drop repeats by
`task_id` (the last line wins). A node that catches up by installing a snapshot does not
see the evictions inside it; the nodes that applied them archived them.

Reading. `search` reads every file of a directory, newest day last; a file that is not
gzip, is truncated or holds a line that is not a record is reported (`skipped`) by name
and left out, never fatal.
"""
from __future__ import annotations

import datetime as _dt
import gzip
import logging
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import orjson

from . import present

log = logging.getLogger("tsched.node.archive")

FORMAT_VERSION = 1
ARCHIVE_FAILURE_EXIT_CODE = 75   # a storage failure: stop rather than lose audit records
FILE_PREFIX, FILE_SUFFIX = "tasks-", ".jsonl.gz"
RECORD_BYTES_MAX = 16 << 20     # a line longer than any task record is corruption


def file_name(now_ms: int) -> str:
    day = _dt.datetime.fromtimestamp(now_ms / 1000, _dt.timezone.utc).strftime("%Y-%m-%d")
    return f"{FILE_PREFIX}{day}{FILE_SUFFIX}"


def archive_dir(config_dir: str, data_dir: str | os.PathLike) -> Path:
    """`[archive] dir`: a relative path is under the node's data_dir."""
    path = Path(config_dir)
    return path if path.is_absolute() else Path(data_dir) / path


class Archive:
    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.archived = 0          # task lines written (metrics, tests)

    def on_apply(self, seq: int, cmds: list, results: list) -> None:
        for cmd, res in zip(cmds, results):
            value = res.value if res.ok else None
            if isinstance(value, dict) and value.get("evicted"):
                try:
                    self.write(cmd.now_ms, value["evicted"])
                except OSError:
                    # The Replica logs and goes on after a listener's exception; going on
                    # here would let compaction drop the only trace of these tasks.
                    log.critical("archive: cannot write %d evicted tasks to %s: stopping",
                                 len(value["evicted"]), self.dir, exc_info=True)
                    logging.shutdown()
                    os._exit(ARCHIVE_FAILURE_EXIT_CODE)

    def write(self, now_ms: int, tasks: Iterable) -> None:
        """Append the tasks as one gzip member, durable when this returns."""
        stamp = present.rfc3339(now_ms)
        lines = b"".join(orjson.dumps({"v": FORMAT_VERSION, "archived_at": stamp,
                                       "task": present.task(t)}) + b"\n" for t in tasks)
        path = self.dir / file_name(now_ms)
        new = not path.exists()
        with open(path, "ab") as f:
            f.write(gzip.compress(lines, compresslevel=6))
            f.flush()
            os.fsync(f.fileno())
        if new:   # the file's directory entry must be durable too
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.archived += lines.count(b"\n")


# --- reading ---------------------------------------------------------------------------

@dataclass
class Query:
    task_id: str | None = None
    tenant: str | None = None
    task_type: str | None = None
    from_ms: int | None = None       # completed_at >= from
    to_ms: int | None = None         # completed_at < to

    def matches(self, task: dict) -> bool:
        if self.task_id is not None and task.get("task_id") != self.task_id:
            return False
        if self.tenant is not None and task.get("tenant") != self.tenant:
            return False
        if self.task_type is not None and task.get("task_type") != self.task_type:
            return False
        if self.from_ms is not None or self.to_ms is not None:
            done = _ms(task.get("completed_at"))
            if done is None:
                return False
            if self.from_ms is not None and done < self.from_ms:
                return False
            if self.to_ms is not None and done >= self.to_ms:
                return False
        return True


@dataclass
class Found:
    records: list[dict] = field(default_factory=list)     # archived records, one per task
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (file, reason)


def _ms(text: Any) -> int | None:
    if not isinstance(text, str):
        return None
    try:
        when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(when.timestamp() * 1000)


def read_file(path: Path) -> list[dict]:
    """Every record of one file; ValueError (with the reason) when any part is bad."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as e:   # not gzip, truncated, bad CRC
        raise ValueError(f"{type(e).__name__}: {e}") from None
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


def search(directory: str | os.PathLike, query: Query) -> Found:
    """Matching records of every archive file in `directory`, repeats dropped by task id
    (the last written wins), in file (day) then line order."""
    found = Found()
    by_id: dict[str, dict] = {}
    paths = sorted(p for p in Path(directory).iterdir()
                   if p.name.startswith(FILE_PREFIX) and p.name.endswith(FILE_SUFFIX))
    for path in paths:
        try:
            records = read_file(path)
        except ValueError as e:
            found.skipped.append((path.name, str(e)))
            continue
        for record in records:
            if query.matches(record["task"]):
                tid = record["task"]["task_id"]
                by_id.pop(tid, None)           # re-insert: the last occurrence's place
                by_id[tid] = record
    found.records = list(by_id.values())
    return found
