"""Reading the audit archive's files (DESIGN 14.3): `tsctl archive search` and tests.

The files are written by the nodes (node/ops/archiver.py) in the format of
statemachine/archive_format.py: `tasks-YYYY-MM-DD.jsonl.gz`, gzip members of JSON lines
`{"v": 1, "archived_at": ..., "task": {...}}`. `search` reads every
file of a directory, oldest day first; a file that is not gzip, is truncated or holds a
line that is not a record is reported (`skipped`) by name and left out, never fatal.
Repeats of a task (a node replayed its log after a crash) are dropped by `task_id`: the
last line wins.
"""
from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from tsched.statemachine.archive_format import (is_archive_file, last_by_task_id, matches,
                                                parse_records)


@dataclass
class Query:
    task_id: str | None = None
    tenant: str | None = None
    task_type: str | None = None
    from_ms: int | None = None       # completed_at >= from
    to_ms: int | None = None         # completed_at < to

    def matches(self, task: dict) -> bool:
        return matches(task, self.task_id, self.tenant, self.task_type, self.from_ms,
                       self.to_ms)


@dataclass
class Found:
    records: list[dict] = field(default_factory=list)     # archived records, one per task
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (file, reason)


def read_file(path: Path) -> list[dict]:
    """Every record of one file; ValueError (with the reason) when any part is bad."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as e:   # not gzip, truncated, bad CRC
        raise ValueError(f"{type(e).__name__}: {e}") from None
    return parse_records(raw)


def search(directory: str | os.PathLike, query: Query) -> Found:
    """Matching records of every archive file in `directory`, repeats dropped by task id
    (the last written wins), in file (day) then line order."""
    found = Found()
    by_id: dict[str, dict] = {}
    paths = sorted(p for p in Path(directory).iterdir() if is_archive_file(p.name))
    for path in paths:
        try:
            records = read_file(path)
        except ValueError as e:
            found.skipped.append((path.name, str(e)))
            continue
        last_by_task_id([r for r in records if query.matches(r["task"])], by_id)
    found.records = list(by_id.values())
    return found
