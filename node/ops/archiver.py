"""The audit archive (DESIGN 14.3): every task this node's replica evicts, on disk.

Writing. `Archive.on_apply` is a Replica apply listener (the Raft thread, under the replica
lock, straight after the batch is applied). A Tick that evicted tasks answers with them
(statemachine: `evicted_answer`); the listener appends one JSON line per task to
`DIR/tasks-YYYY-MM-DD.jsonl.gz` (the UTC day of the Tick's `now_ms`) as one gzip member,
then flushes and fsyncs the file before it returns. Raft compaction snapshots the state
after apply, so a snapshot that no longer holds a task (and the log compacted behind it)
can only exist once the task's line is on disk. A crash after the write and before the
next snapshot replays the Tick and appends the task again: readers drop repeats by
`task_id` (the last line wins). A node that catches up by installing a snapshot does not
see the evictions inside it; the nodes that applied them archived them.

Beside each task file the archiver keeps its index (node/ops/archive_index.py), so that
`GET /v1/archive?task_id=` reads one member rather than every line. Day files whose day
ended `keep_days` before now are removed whole (`prune`): when the node starts and when an
eviction opens a new day's file (the Tick's `now_ms` is "now", so replicas prune alike).

Reading is the client's (client/archive.py: `tsctl archive search`); the file names and
the format version are statemachine/archive_format.py's, which both sides share.
"""
from __future__ import annotations

import functools
import gzip
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import orjson

from tsched.statemachine.archive_format import (AUDIT_FILE_PREFIX, FORMAT_VERSION,
                                                expired_files, file_name)
from tsched.statemachine.audit import AuditEntry
from tsched.statemachine.commands import Command
from tsched.statemachine.errors import Result
from tsched.statemachine.model import Task

from tsched.node import present
from tsched.node.ops.archive_index import IndexWriter, fsync_dir
from tsched.node.raft.storage_faults import STORAGE_ERROR_EXIT_CODE

log = logging.getLogger("tsched.node.archive")

# A storage failure, like a failed log write (journal.py): stop rather than lose audit
# records; a shard's supervisor stops the whole node on it too.
ARCHIVE_FAILURE_EXIT_CODE = STORAGE_ERROR_EXIT_CODE
R = TypeVar("R")   # a record: an evicted Task or AuditEntry


def archive_dir(config_dir: str, data_dir: str | os.PathLike) -> Path:
    """`[archive] dir`: a relative path is under the node's data_dir."""
    path = Path(config_dir)
    return path if path.is_absolute() else Path(data_dir) / path


def _named(task: dict, steps: dict[str, dict] | None) -> dict:
    if steps and task["task_id"] in steps:
        task["workflow"] = steps[task["task_id"]]
    return task


def prune(directory: Path, now_ms: int, keep_days: int) -> list[str]:
    """Remove the archive files of `directory` whose UTC day ended `keep_days` days or more
    before `now_ms`; their names. A file another process removed meanwhile is skipped."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    gone = []
    for name in expired_files(names, now_ms, keep_days):
        try:
            os.unlink(directory / name)
        except FileNotFoundError:
            continue
        gone.append(name)
        log.info("event=archive_pruned file=%s keep_days=%d", name, keep_days)
    return gone


class Archive:
    def __init__(self, directory: Path, keep_days: int | None = None) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.keep_days = keep_days   # None: keep every file
        self.index = IndexWriter(self.dir)
        self.archived = 0          # task lines written (metrics, tests)
        self.audit_archived = 0    # audit entry lines written

    def prune(self, now_ms: int) -> list[str]:
        """The files older than keep_days removed (none without keep_days)."""
        if self.keep_days is None:
            return []
        gone = prune(self.dir, now_ms, self.keep_days)
        self.index.forget(gone)
        return gone

    def on_apply(self, seq: int, cmds: Sequence[Command], results: Sequence[Result]) -> None:
        for cmd, res in zip(cmds, results):
            value = res.value if res.ok else None
            if isinstance(value, dict) and value.get("evicted"):
                self._or_stop(functools.partial(self.write, steps=value.get("steps")),
                              cmd.now_ms, value["evicted"], "tasks")
            if res.ok and res.details and res.details.get("audit_evicted"):
                self._or_stop(self.write_audit, cmd.now_ms, res.details["audit_evicted"],
                              "audit entries")

    def _or_stop(self, write: Callable[[int, list[R]], None], now_ms: int, records: list[R],
                 what: str) -> None:
        try:
            write(now_ms, records)
        except OSError:
            # The Replica logs and goes on after a listener's exception; going on here
            # would let compaction drop the only trace of these records.
            log.critical("archive: cannot write %d evicted %s to %s: stopping",
                         len(records), what, self.dir, exc_info=True)
            logging.shutdown()
            os._exit(ARCHIVE_FAILURE_EXIT_CODE)

    def write(self, now_ms: int, tasks: Iterable[Task],
              steps: dict[str, dict] | None = None) -> None:
        """Append the tasks as one gzip member, durable when this returns. `steps`: the
        workflow and step of those that are a workflow's steps (as GET /v1/tasks/{id})."""
        stamp = present.rfc3339(now_ms)
        tasks = list(tasks)
        lines = b"".join(orjson.dumps({"v": FORMAT_VERSION, "archived_at": stamp,
                                       "task": _named(present.task(t), steps)}) + b"\n"
                         for t in tasks)
        name = file_name(now_ms)
        start, end = self._append(name, lines, now_ms)
        self.index.add(name, start, end, (t.task_id for t in tasks))
        self.archived += len(tasks)

    def write_audit(self, now_ms: int, entries: Iterable[AuditEntry]) -> None:
        """Append evicted audit entries (DESIGN 14.6) to the day's audit file, durably."""
        stamp = present.rfc3339(now_ms)
        lines = b"".join(orjson.dumps({"v": FORMAT_VERSION, "archived_at": stamp,
                                       "audit": present.audit_entry(e)}) + b"\n"
                         for e in entries)
        self._append(file_name(now_ms, AUDIT_FILE_PREFIX), lines, now_ms)
        self.audit_archived += lines.count(b"\n")

    def _append(self, name: str, lines: bytes, now_ms: int) -> tuple[int, int]:
        """Append `lines` to the day file `name` as one gzip member, durably; the member's
        [start, end) byte offsets. A new file first prunes the expired days."""
        path = self.dir / name
        new = not path.exists()
        if new:
            self.prune(now_ms)
        member = gzip.compress(lines, compresslevel=6)
        with open(path, "ab") as f:
            start = os.fstat(f.fileno()).st_size
            f.write(member)
            f.flush()
            os.fsync(f.fileno())
        if new:   # the file's directory entry must be durable too
            fsync_dir(self.dir)
        return start, start + len(member)
