"""Checks of the priority-range and retry-after fields (DESIGN.md sections 5 and 7): a
claim's `priority_min` / `priority_max` and a failure's `retry_after_s`."""
from __future__ import annotations

import math
from typing import Any

from tsched.statemachine.limits import LIMITS, SECOND_MS

from tsched.node.errors import invalid

PRIORITY_MAX = LIMITS.priority_max
RETRY_AFTER_S_MAX = LIMITS.backoff_ms_max // SECOND_MS


def _priority(value: Any, name: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= PRIORITY_MAX:
        raise invalid(f"{name} must be an integer in 0..{PRIORITY_MAX}", field=name)
    return value


def priorities(lo_value: Any, hi_value: Any) -> tuple[int, int]:
    """A claim's inclusive effective-priority range; default the whole range."""
    lo = _priority(lo_value, "priority_min", 0)
    hi = _priority(hi_value, "priority_max", PRIORITY_MAX)
    if lo > hi:
        raise invalid(f"priority_max ({hi}) is below priority_min ({lo})", field="priority_max")
    return lo, hi


def retry_after_ms(value: Any) -> int:
    """A failure's `retry_after_s`: 0 < N <= the longest backoff (the state machine also
    holds it to the task's own `retry.max_s`); 0 when absent (the backoff decides)."""
    if value is None:
        return 0
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or not 0 < value <= RETRY_AFTER_S_MAX
            or round(value * SECOND_MS) <= 0):
        raise invalid(f"retry_after_s must be a number in (0, {RETRY_AFTER_S_MAX}]",
                      field="retry_after_s")
    return round(value * SECOND_MS)
