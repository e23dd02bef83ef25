"""The operation history: every client operation as invoke + ok / fail / info lines.

`ok` means the operation definitely happened, `fail` that it definitely did not (a 4xx
answer), `info` that the outcome is unknown (timeout, 5xx, connection error): the checker
must allow both outcomes for those. Each line carries monotonic seconds (for real-time
order) and wall seconds (to compare with the server's times).
"""
from __future__ import annotations

import itertools
import json
import time
from typing import Any, Iterator

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
COMPLETIONS = (OK, FAIL, INFO)


class History:
    """Appends operations to `path` as JSON lines; `invoke` returns the op id to complete."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = open(path, "a", encoding="utf-8")
        self._ids = itertools.count(1)
        self.ops = 0

    def _write(self, entry: dict) -> None:
        entry["mono"] = time.monotonic()
        entry["wall"] = time.time()
        self._file.write(json.dumps(entry, separators=(",", ":"), default=str) + "\n")
        self._file.flush()

    def invoke(self, process: str, f: str, node: str | None = None, **args: Any) -> int:
        op_id = next(self._ids)
        self.ops += 1
        self._write({"id": op_id, "type": INVOKE, "process": process, "f": f, "node": node,
                     "args": args})
        return op_id

    def complete(self, op_id: int, kind: str, process: str, f: str, node: str | None = None,
                 result: Any = None, error: Any = None) -> None:
        assert kind in COMPLETIONS, kind
        self._write({"id": op_id, "type": kind, "process": process, "f": f, "node": node,
                     "result": result, "error": error})

    def event(self, process: str, f: str, kind: str, **fields: Any) -> None:
        """A one-line record that is not a client operation (nemesis start/heal, notes)."""
        self._write({"id": next(self._ids), "type": kind, "process": process, "f": f,
                     **fields})

    def close(self) -> None:
        self._file.close()


def read(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def pairs(entries: list[dict]) -> Iterator[tuple[dict, dict | None]]:
    """(invoke, completion) per operation; completion None when the run ended first."""
    pending: dict[int, dict] = {}
    done: dict[int, dict] = {}
    order: list[int] = []
    for e in entries:
        if e.get("type") == INVOKE:
            pending[e["id"]] = e
            order.append(e["id"])
        elif e.get("type") in COMPLETIONS and e["id"] in pending:
            done[e["id"]] = e
    for op_id in order:
        yield pending[op_id], done.get(op_id)
