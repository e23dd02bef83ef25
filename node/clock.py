"""The node's wall clock: the only place the node reads wall time for commands.

Commands carry `now_ms` from here (DESIGN.md section 3). `TSCHED_CLOCK_OFFSET_MS` shifts it,
so tests can give one node a skewed clock and check that replicated time never goes back.
"""
from __future__ import annotations

import os
import time

OFFSET_ENV = "TSCHED_CLOCK_OFFSET_MS"


class Clock:
    def __init__(self, offset_ms: int = 0) -> None:
        self.offset_ms = offset_ms

    @classmethod
    def from_env(cls, environ=os.environ) -> "Clock":
        raw = environ.get(OFFSET_ENV, "").strip()
        try:
            return cls(int(raw) if raw else 0)
        except ValueError:
            raise ValueError(f"{OFFSET_ENV} must be an integer number of ms, got {raw!r}") from None

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms
