"""The node's wall clock: the only place the node reads wall time for commands.

Commands carry `now_ms` from here (DESIGN.md section 3). `TSCHED_CLOCK_OFFSET_MS` shifts it,
so tests can give one node a skewed clock and check that replicated time never goes back.
`TSCHED_CLOCK_OFFSET_FILE` (tests only) names a file holding an extra offset in ms that the
clock re-reads at most every 100 ms, so a fault harness can make a running node's clock jump.
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping

OFFSET_ENV = "TSCHED_CLOCK_OFFSET_MS"
OFFSET_FILE_ENV = "TSCHED_CLOCK_OFFSET_FILE"
OFFSET_FILE_REREAD_NS = 100_000_000


class Clock:
    def __init__(self, offset_ms: int = 0, offset_file: str | None = None) -> None:
        self.offset_ms = offset_ms
        self.offset_file = offset_file
        self._file_offset_ms = 0
        self._file_read_at_ns: int | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Clock:
        raw = environ.get(OFFSET_ENV, "").strip()
        try:
            return cls(int(raw) if raw else 0, environ.get(OFFSET_FILE_ENV) or None)
        except ValueError:
            raise ValueError(f"{OFFSET_ENV} must be an integer number of ms, got {raw!r}") from None

    def now_ms(self) -> int:
        extra = self._offset_from_file() if self.offset_file else 0
        return time.time_ns() // 1_000_000 + self.offset_ms + extra

    def _offset_from_file(self) -> int:
        """The file's offset; a missing or unreadable file keeps the last good value."""
        assert self.offset_file is not None, "read only when an offset file is named"
        now_ns = time.monotonic_ns()
        if self._file_read_at_ns is not None and now_ns - self._file_read_at_ns < OFFSET_FILE_REREAD_NS:
            return self._file_offset_ms
        self._file_read_at_ns = now_ns
        try:
            with open(self.offset_file, encoding="ascii") as f:
                self._file_offset_ms = int(f.read().strip() or 0)
        except (OSError, ValueError):
            pass
        return self._file_offset_ms
