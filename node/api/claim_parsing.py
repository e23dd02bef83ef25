"""The workers' request bodies (DESIGN.md sections 5, 5.1 and 7): a claim's (its
`priority_min` / `priority_max` or `tier_weights`, the completions it carries), a heartbeat's
and a completion's or failure's (its `retry_after_s`)."""
from __future__ import annotations

import math
from typing import Any

from tsched.statemachine.limits import LIMITS, SECOND_MS
from tsched.statemachine.tiers import DEFAULT_TIERS, Tier

from tsched.node.api.validate import (BATCH_MAX, CLAIM_TASKS_MAX, LEASE_S_MAX, LEASE_S_MIN,
                                      PREFETCH_MS_MAX, RESULT_BYTES_MAX, TASK_TYPE_CHARS_MAX,
                                      TASK_TYPES_MAX, WAIT_S_MAX, FENCING_TOKEN_MAX, Fields,
                                      boolean, error_text, integer, json_text, number,
                                      seconds_ms, task_id)
from tsched.node.api.validate import name as _name
from tsched.node.errors import ApiError, invalid

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


# --- the workers' bodies ----------------------------------------------------------------

def lease_ms(value: Any) -> int:
    return seconds_ms(value, "lease_s", LEASE_S_MIN, LEASE_S_MAX, 30_000)


def claim(body: Any, tiers: tuple[Tier, ...] = DEFAULT_TIERS) -> dict[str, Any]:
    """A claim's parameters; `tiers`, the cluster's table, names tier_weights' tiers."""
    f = Fields(body)
    types = f.get("task_types")
    if not isinstance(types, list) or not 1 <= len(types) <= TASK_TYPES_MAX:
        raise invalid(f"task_types must be a list of 1..{TASK_TYPES_MAX} task types",
                      field="task_types")
    out = {
        "worker_id": _name(f.get("worker_id"), "worker_id"),
        "task_types": tuple(sorted({_name(t, "task_types[]", TASK_TYPE_CHARS_MAX)
                                    for t in types})),
        "max_tasks": integer(f.get("max_tasks"), "max_tasks", 1, CLAIM_TASKS_MAX, default=1),
        "wait_s": number(f.get("wait_s"), "wait_s", 0, WAIT_S_MAX, default=0),
        "lease_ms": lease_ms(f.get("lease_s")),
        "prefetch_ms": integer(f.get("prefetch_ms"), "prefetch_ms", 0, PREFETCH_MS_MAX,
                               default=0),
        "completions": claim_completions(f.get("completions")),
        **claim_tiers(f.get("priority_min"), f.get("priority_max"), f.get("tier_weights"),
                      tiers),
    }
    f.done()
    return out


def claim_completions(items: Any) -> list[dict[str, Any]] | None:
    """A claim's `completions` (those of `POST /v1/completions`); None when absent, and
    an empty list allowed (a worker with nothing to report sends the same shape)."""
    if items is None:
        return None
    if not isinstance(items, list):
        raise invalid("completions must be a list", field="completions")
    if len(items) > BATCH_MAX:
        raise ApiError("too_large", f"at most {BATCH_MAX} completions per request",
                       {"field": "completions", "limit": BATCH_MAX})
    return [completion(it, f"completions[{i}]") for i, it in enumerate(items)]


def fencing_token(value: Any) -> int:
    if value is None:
        raise invalid("fencing_token is required", field="fencing_token")
    return integer(value, "fencing_token", 0, FENCING_TOKEN_MAX)


def heartbeat(body: Any, where: str = "body") -> dict[str, Any]:
    f = Fields(body, where)
    out: dict[str, Any] = {"fencing_token": fencing_token(f.get("fencing_token")),
                           "lease_ms": lease_ms(f.get("lease_s"))}
    if where != "body":
        out["task_id"] = task_id(f.get("task_id"))
    f.done()
    return out


def completion(body: Any, where: str = "body", *, failing: bool | None = None) -> dict[str, Any]:
    """complete ({fencing_token, result}) or fail ({fencing_token, error, retryable}).

    `failing` None (batch items) decides by the fields present."""
    f = Fields(body, where)
    if failing is None:
        failing = "error" in body or "retryable" in body or "retry_after_s" in body
        if failing and "result" in body:
            raise invalid(f"{where} has both result and error", field="result")
    out: dict[str, Any] = {"fencing_token": fencing_token(f.get("fencing_token")),
                           "failing": failing}
    if where != "body":
        out["task_id"] = task_id(f.get("task_id"))
    if failing:
        out["error"] = error_text(f.get("error"))
        out["retryable"] = boolean(f.get("retryable"), "retryable", True)
        out["retry_after_ms"] = retry_after_ms(f.get("retry_after_s"))
    else:
        out["result_json"] = json_text(f.get("result"), "result", RESULT_BYTES_MAX)
    f.done()
    return out
