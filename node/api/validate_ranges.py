"""Checks of the priority-range and retry-after fields (DESIGN.md sections 5, 5.1 and 7): a
claim's `priority_min` / `priority_max` or `tier_weights`, and a failure's `retry_after_s`."""
from __future__ import annotations

import math
from typing import Any

from tsched.statemachine.limits import LIMITS, SECOND_MS
from tsched.statemachine.tiers import DEFAULT_TIERS, Tier

from tsched.node.errors import invalid

PRIORITY_MAX = LIMITS.priority_max
RETRY_AFTER_S_MAX = LIMITS.backoff_ms_max // SECOND_MS
TIER_WEIGHT_MAX = LIMITS.tier_weight_max


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


def claim_tiers(lo_value: Any, hi_value: Any, weights_value: Any,
                tiers: tuple[Tier, ...] = DEFAULT_TIERS) -> dict[str, Any]:
    """A claim's `priorities` (inclusive range) and `tier_weights` ((lo, hi, weight) per
    named tier of the cluster's table, most urgent first; () when absent). Weights and a
    range exclude each other."""
    out: dict[str, Any] = {"priorities": priorities(lo_value, hi_value), "tier_weights": ()}
    if weights_value is None:
        return out
    if lo_value is not None or hi_value is not None:
        raise invalid("tier_weights cannot be given with priority_min / priority_max",
                      field="tier_weights")
    out["tier_weights"] = tier_weights(weights_value, tiers)
    return out


def tier_weights(value: Any, tiers: tuple[Tier, ...] = DEFAULT_TIERS
                 ) -> tuple[tuple[int, int, int], ...]:
    """`{"critical": 50, "high": 30, ...}` -> ((0, 0, 50), (1, 3, 30), ...), in the order of
    the cluster's tier table (most urgent first). Names from that table, each once (an
    object holds a name once), integer weights in 1..TIER_WEIGHT_MAX."""
    names = ", ".join(t.name for t in tiers)
    if not isinstance(value, dict) or not value:
        raise invalid(f"tier_weights must be an object of tier name -> integer weight "
                      f"(tiers: {names})", field="tier_weights")
    known = {t.name for t in tiers}
    for name, weight in value.items():
        if name not in known:
            raise invalid(f"tier_weights names an unknown tier {name!r} (tiers: {names})",
                          field="tier_weights")
        if isinstance(weight, bool) or not isinstance(weight, int) \
                or not 1 <= weight <= TIER_WEIGHT_MAX:
            raise invalid(f"tier_weights[{name!r}] must be an integer in 1..{TIER_WEIGHT_MAX}",
                          field="tier_weights")
    return tuple((t.lo, t.hi, value[t.name]) for t in tiers if t.name in value)


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
