"""The index beside each archived task file (DESIGN 14.3): its writing, its repair and its
reading. The record layout is statemachine/archive_format.py's (INDEX_RECORD).

Writing (`IndexWriter.add`, the Raft thread, from the archiver): after a gzip member is
durable in `tasks-DAY.jsonl.gz`, its records go to `tasks-DAY.idx` and are fsynced too,
before the apply listener returns; so whatever compaction may drop is indexed. The first
time this process writes to a day's index it checks that the index ends where the data
file does; when it does not (a crash between the two writes, or a file written by a version
without the index) the index is rebuilt from the data file first.

Reading is archive_search.py's (`indexed_members`): the offsets of the members that may
hold a task id, and how far the index covers the data file.
"""
from __future__ import annotations

import logging
import mmap
import os
from pathlib import Path
from typing import Iterable

import orjson

from tsched.statemachine.archive_format import (INDEX_RECORD, index_end, index_name,
                                                index_records)

from tsched.node.ops.archive_search import Damaged, lines_of

log = logging.getLogger("tsched.node.archive")


def fsync_dir(directory: Path) -> None:
    """A new file's directory entry made durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class IndexWriter:
    """Appends index records for the members the archiver writes (one writer per dir)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._checked: set[str] = set()     # index names found whole by this process

    def add(self, data_name: str, start: int, end: int, task_ids: Iterable[str]) -> None:
        """Index the member at bytes [start, end) of `data_name`, durably."""
        name = index_name(data_name)
        path = self.dir / name
        new = not path.exists()
        if name not in self._checked:
            if not new and _end_of(path) != start or new and start != 0:
                rebuild(self.dir / data_name, path, start)
                new = False
            self._checked.add(name)
        with open(path, "ab") as f:
            f.write(index_records(task_ids, start, end))
            f.flush()
            os.fsync(f.fileno())
        if new:
            fsync_dir(self.dir)

    def forget(self, names: Iterable[str]) -> None:
        """Index files removed (pruned): a later write checks them afresh."""
        self._checked.difference_update(names)


def _end_of(path: Path) -> int:
    """Where the index at `path` ends in its data file (mapped: its last records are read)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return index_end(buf)[0]


def rebuild(data: Path, index: Path, upto: int) -> None:
    """Write `index` afresh from the first `upto` bytes of `data` (its members read and their
    task ids keyed), through a temporary file renamed over it."""
    out = bytearray()
    member, ids = 0, list[str]()
    try:
        with open(data, "rb") as f:
            for offset, _, line in lines_of(f, 0):
                if offset >= upto:
                    break
                if offset != member:
                    out += index_records(ids, member, offset)
                    member, ids = offset, []
                if line.strip():
                    ids.append(_task_id(line))
    except (Damaged, ValueError, FileNotFoundError) as e:
        log.warning("archive: indexing %s stopped at the member at byte %d: %s",
                    data.name, member, e)
        upto = member
    if member < upto:
        out += index_records(ids, member, upto)
    tmp = index.with_name(index.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(out)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, index)
    fsync_dir(index.parent)
    log.info("event=archive_index_rebuilt file=%s tasks=%d", index.name,
             len(out) // INDEX_RECORD.size)


def _task_id(line: bytes) -> str:
    task = orjson.loads(line).get("task")
    if not isinstance(task, dict) or not isinstance(task.get("task_id"), str):
        raise ValueError("a line that is not an archive record")
    return task["task_id"]
