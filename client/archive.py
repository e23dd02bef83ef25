"""Reading the audit archive's files (DESIGN 14.3): `tsctl archive search` and tests.

The files are written by the nodes (node/ops/archive.py) in the format of
statemachine/archive_format.py: `tasks-YYYY-MM-DD.jsonl.gz`, gzip members of JSON lines
`{"v": 1, "archived_at": ..., "task": {...}}`. `search` reads every
file of a directory, oldest day first; a file that is not gzip, is truncated or holds a
line that is not a record is reported (`skipped`) by name and left out, never fatal.
Repeats of a task (a node replayed its log after a crash) are dropped by `task_id`: the
last line wins.
"""
from __future__ import annotations

import datetime as _dt
import gzip
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tsched.statemachine.archive_format import is_archive_file, last_by_task_id, parse_records


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
