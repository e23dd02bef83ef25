"""Searching this node's audit archive (DESIGN 14.3, `GET /v1/archive`).

Blocking file reading: the handler (node/api/archive.py) runs `search` in a thread. The
files are those node/ops/archiver.py writes, `tasks-YYYY-MM-DD.jsonl.gz`, each a series of
gzip members (one per evicting Tick) of JSON lines; names, line parsing and matching are
statemachine/archive_format.py's, which `tsctl archive search --dir` shares.

A file is streamed member by member with zlib, never read whole: memory is a read chunk,
one line (at most RECORD_BYTES_MAX) and the page. A position is (day, byte offset of a
member, lines of it already read), so the next page seeks to its member instead of
decompressing the file again from its start. One search reads at most `days_max` files
and `lines_max` lines and keeps at most `limit` records, then says where to go on.

A search by task id reads a file's index (`tasks-DAY.idx`, archive_index.py) instead of its
lines: only the members the index names are decompressed, then whatever part of the file
the index does not cover yet (a file without an index is read line by line, as before).
"""
from __future__ import annotations

import mmap
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from tsched.statemachine.archive_format import (FILE_PREFIX, FILE_SUFFIX, RECORD_BYTES_MAX,
                                                day_of, file_day, index_end, index_members,
                                                index_name, last_by_task_id, matches,
                                                needle, parse_record)

ARCHIVE_DAYS_SCANNED_MAX = 31
ARCHIVE_LINES_SCANNED_MAX = 200_000
LIMIT_MAX, LIMIT_DEFAULT = 1_000, 100
CHUNK_BYTES = 64 * 1024
GZIP_WBITS = 31          # zlib: a gzip header and trailer around the deflate stream


@dataclass(frozen=True)
class Position:
    """Where a search goes on: the file of `day`, its member at byte `offset`, after the
    first `skip` lines of that member."""
    day: str
    offset: int = 0
    skip: int = 0


@dataclass(frozen=True)
class Search:
    task_id: str | None = None
    tenant: str | None = None
    from_ms: int | None = None
    to_ms: int | None = None
    limit: int = LIMIT_DEFAULT
    start: Position | None = None


@dataclass
class Page:
    records: list[dict] = field(default_factory=list)
    next: Position | None = None              # None: nothing is left to read
    skipped: list[dict] = field(default_factory=list)   # [{"file", "reason"}]
    lines: int = 0                            # lines read (tests, bounds)


class Damaged(Exception):
    """The rest of a file cannot be read (the message says why)."""


def lines_of(f: BinaryIO, offset: int) -> Iterator[tuple[int, int, bytes]]:
    """(member offset, line number in the member from 1, line) of every line from the
    member at byte `offset` on. Damaged when the bytes are not gzip, end inside a member,
    or hold a line over RECORD_BYTES_MAX."""
    f.seek(offset)
    member, fed, d, pending, lineno = offset, offset, zlib.decompressobj(GZIP_WBITS), b"", 0
    data = b""
    while True:
        if not data:
            data = f.read(CHUNK_BYTES)
            fed += len(data)
            if not data:
                if pending or fed != member:   # the last member is cut short
                    raise Damaged(f"truncated gzip member at byte {member}")
                return
        complete, pending, data = _lines(d, data, pending, member)
        for line in complete:
            lineno += 1
            yield member, lineno, line
        if d.eof:
            if pending:
                raise Damaged(f"the member at byte {member} ends inside a line")
            data = d.unused_data
            member = fed - len(data)
            d, lineno = zlib.decompressobj(GZIP_WBITS), 0


def _lines(d: Any, data: bytes, pending: bytes, member: int
           ) -> tuple[list[bytes], bytes, bytes]:
    """One step of reading a gzip member by lines: (the lines `data` completes, the partial
    line after them, the input the decompressor left); Damaged as `lines_of`."""
    try:
        out = d.decompress(data, CHUNK_BYTES)
    except zlib.error as e:
        raise Damaged(f"not gzip at byte {member}: {e}") from None
    *complete, pending = (pending + out).split(b"\n")
    if len(pending) > RECORD_BYTES_MAX:
        raise Damaged(f"a line over {RECORD_BYTES_MAX} bytes in the member at byte {member}")
    return complete, pending, d.unconsumed_tail


def member_lines(f: BinaryIO, offset: int) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, line) of the one gzip member at byte `offset`; Damaged as
    `lines_of`."""
    f.seek(offset)
    d, pending, lineno, data = zlib.decompressobj(GZIP_WBITS), b"", 0, b""
    while not d.eof:
        data = data or f.read(CHUNK_BYTES)
        if not data:
            raise Damaged(f"truncated gzip member at byte {offset}")
        complete, pending, data = _lines(d, data, pending, offset)
        for line in complete:
            lineno += 1
            yield lineno, line
    if pending:
        raise Damaged(f"the member at byte {offset} ends inside a line")


def search(directory: Path, q: Search, days_max: int = ARCHIVE_DAYS_SCANNED_MAX,
           lines_max: int = ARCHIVE_LINES_SCANNED_MAX) -> Page:
    """The records of `directory`'s files that match `q`, from `q.start` (else the first
    day that can hold a match) on, within the bounds; a task at most once per page (the
    last copy read)."""
    page, by_id = Page(), dict[str, dict]()
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        names = []       # nothing archived yet
    days = sorted(d for d in (file_day(n) for n in names) if d is not None)
    first = q.start.day if q.start is not None else ""
    if q.from_ms is not None:     # a task is evicted on or after the day it completed
        first = max(first, day_of(q.from_ms))
    days = [d for d in days if d >= first]
    for i, day in enumerate(days):
        start = q.start if q.start is not None and q.start.day == day else Position(day)
        if i >= days_max:
            page.next = start
            break
        path = directory / f"{FILE_PREFIX}{day}{FILE_SUFFIX}"
        if q.task_id is not None and start.offset == 0 and start.skip == 0:
            page.next = _lookup(path, start, q, by_id, page, lines_max)
        else:
            page.next = _scan(path, start, q, by_id, page, lines_max)
        if page.next is not None:
            break
    page.records = list(by_id.values())
    return page


def _scan(path: Path, start: Position, q: Search, by_id: dict, page: Page,
          lines_max: int) -> Position | None:
    """Read one file from `start`; the position to go on from when a bound stopped it."""
    marks = [needle(k, v) for k, v in (("task_id", q.task_id), ("tenant", q.tenant)) if v]
    try:
        with open(path, "rb") as f:
            for member, lineno, line in lines_of(f, start.offset):
                if member == start.offset and lineno <= start.skip:
                    continue
                if page.lines >= lines_max or len(by_id) >= q.limit:
                    return Position(start.day, member, lineno - 1)
                page.lines += 1
                if not line.strip() or not all(m in line for m in marks):
                    continue
                record = parse_record(line, lineno)
                if matches(record["task"], q.task_id, q.tenant, None, q.from_ms, q.to_ms):
                    last_by_task_id([record], by_id)
    except FileNotFoundError:
        return None      # removed by an operator since the listing
    except (Damaged, ValueError, OSError) as e:
        page.skipped.append({"file": path.name, "reason": str(e)})
    return None


def indexed_members(data: Path, task_id: str) -> tuple[list[int], int] | None:
    """(offsets of the members of `data` that may hold `task_id`, the byte offset up to
    which its index covers it); None when `data` has no index. The index is mapped, not
    read: one `find` in C over 16 bytes a task."""
    try:
        f = open(data.with_name(index_name(data.name)), "rb")
    except FileNotFoundError:
        return None
    with f:
        if os.fstat(f.fileno()).st_size == 0:
            return [], 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            end, used = index_end(buf)
            return index_members(buf, task_id, used), end


def _lookup(path: Path, start: Position, q: Search, by_id: dict, page: Page,
            lines_max: int) -> Position | None:
    """A search by id of one whole file through its index: the members it names, then the
    part past what it covers (line by line); `_scan` of the whole file without an index."""
    assert q.task_id is not None
    if len(by_id) >= q.limit:
        return start
    try:
        found = indexed_members(path, q.task_id)
    except (OSError, ValueError):    # an unreadable index: the lines are read instead
        found = None
    if found is None:
        return _scan(path, start, q, by_id, page, lines_max)
    offsets, covered = found
    mark = needle("task_id", q.task_id)
    try:
        with open(path, "rb") as f:
            for offset in offsets:
                for lineno, line in member_lines(f, offset):
                    page.lines += 1
                    if mark in line:
                        record = parse_record(line, lineno)
                        if record["task"].get("task_id") == q.task_id and matches(
                                record["task"], None, None, None, q.from_ms, q.to_ms):
                            last_by_task_id([record], by_id)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return None
    except (Damaged, ValueError, OSError) as e:
        page.skipped.append({"file": path.name, "reason": str(e)})
        return None
    if size <= covered:
        return None
    return _scan(path, Position(start.day, covered, 0), q, by_id, page, lines_max)
