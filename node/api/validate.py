"""Request JSON -> typed, bounded values and commands (DESIGN.md section 7).

Every field is type-checked and bounded here, before anything is proposed; unknown fields
are refused. The state machine checks again at apply time (its limits are authoritative).
Here: the bounds, the shared field checks and the query strings; each resource parses its
own body beside its handlers (a task submission's in submission.py, the workers' in
claim_parsing.py).
"""
from __future__ import annotations

import datetime as _dt
import math
import re
from typing import Mapping, TypedDict, overload

import orjson

from tsched.statemachine import validate as SV
from tsched.statemachine.limits import API_LIMITS, LIMITS, SECOND_MS

from tsched.node.errors import ApiError, invalid

# Every bound comes from statemachine/limits.py (one place): the state machine's own bounds
# (LIMITS), converted to the API's units, so that what the state machine would refuse is
# refused here, before anything is proposed; and the bounds only the API has (API_LIMITS).
# A cluster may set `[limits]`: the HTTP layer keeps the defaults, so a raised limit is
# still refused here and a lowered one is refused by the state machine at apply.
L, A = LIMITS, API_LIMITS
PAYLOAD_BYTES_MAX = L.payload_bytes_max
RESULT_BYTES_MAX = L.result_bytes_max
ERROR_BYTES_MAX = L.error_bytes_max
ERROR_CHARS_MAX = ERROR_BYTES_MAX        # characters of an error are bytes at most
ID_CHARS_MAX = L.id_chars_max
TENANT_CHARS_MAX = L.tenant_chars_max
TASK_TYPE_CHARS_MAX = L.task_type_chars_max
IDEMPOTENCY_KEY_CHARS_MAX = L.idempotency_key_chars_max
TRACEPARENT_CHARS = SV.TRACEPARENT_CHARS     # a W3C traceparent (version 00)
BODY_BYTES_MAX = A.body_bytes_max
BATCH_MAX = A.request_items_max
WORKER_SLOTS_MAX = A.worker_slots_max
TASK_TYPES_MAX = L.claim_task_types_max
CLAIM_TASKS_MAX = L.claim_tasks_max
WAIT_S_MAX = A.claim_wait_ms_max // SECOND_MS
LEASE_S_MIN = L.lease_ms_min / SECOND_MS
LEASE_S_MAX = L.lease_ms_max // SECOND_MS
PREFETCH_MS_MAX = L.prefetch_ms_max
PRIORITY_MAX = L.priority_max
TIMEOUT_S_MIN = L.timeout_ms_min / SECOND_MS
TIMEOUT_S_MAX = L.timeout_ms_max // SECOND_MS
DELAY_S_MAX = L.run_at_ahead_ms_max // SECOND_MS
MAX_RETRIES_MAX = L.max_retries_max
RETRY_S_MAX = L.backoff_ms_max // SECOND_MS
MULTIPLIER_MIN = L.multiplier_milli_min / 1000
MULTIPLIER_MAX = L.multiplier_milli_max / 1000
JITTER_MAX = L.jitter_permille_max / 1000
FENCING_TOKEN_MAX = L.fencing_token_max
LIST_LIMIT_MAX = A.list_page_items_max
CURSOR_CHARS_MAX = A.cursor_chars_max
JSON_DEPTH_MAX = A.json_depth_max
EPOCH_MS_MAX = A.epoch_ms_max
STATES = ("pending", "running", "completed", "cancelled", "dead_letter", "discarded")
LISTED_STATES = STATES + ("retrying",)   # `retrying`: a view of pending (DESIGN 14.1)

TENANT_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,%d}$" % TENANT_CHARS_MAX)
NAME_RE = re.compile(r"^[^\x00-\x1f\x7f]+$")   # lengths are checked by `text`


class Fields:
    """Reads a JSON object field by field and refuses the ones nobody asked for."""

    def __init__(self, body: object, where: str = "body") -> None:
        if not isinstance(body, dict):
            raise invalid(f"{where} must be a JSON object")
        self.body: dict[str, object] = body
        self.where = where
        self.seen: set[str] = set()

    def get(self, key: str) -> object:
        self.seen.add(key)
        return self.body.get(key)

    def has(self, key: str) -> bool:
        self.seen.add(key)
        return key in self.body and self.body[key] is not None

    def done(self) -> None:
        if self.body.keys() <= self.seen:
            return
        unknown = sorted(k for k in self.body if k not in self.seen)
        if unknown:
            raise invalid(f"unknown field(s) in {self.where}: {', '.join(unknown)}",
                          fields=unknown)


# --- scalar checks -------------------------------------------------------------------------

def integer(value: object, name: str, lo: int, hi: int, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"{name} must be an integer in {lo}..{hi}", field=name)
    if not lo <= value <= hi:
        raise invalid(f"{name} must be in {lo}..{hi}, got {value}", field=name)
    return value


def number(value: object, name: str, lo: float, hi: float, default: float | None = None) -> float:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise invalid(f"{name} must be a number in {lo}..{hi}", field=name)
    if not lo <= value <= hi:
        raise invalid(f"{name} must be in {lo}..{hi}, got {value}", field=name)
    return value


def seconds_ms(value: object, name: str, lo_s: float, hi_s: float, default_ms: int) -> int:
    if value is None:
        return default_ms
    return round(number(value, name, lo_s, hi_s) * 1000)


def boolean(value: object, name: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"{name} must be true or false", field=name)
    return value


@overload
def text(value: object, name: str, hi: int, *, lo: int = 1, default: str,
         pattern: re.Pattern[str] | None = None) -> str: ...
@overload
def text(value: object, name: str, hi: int, *, lo: int = 1, default: None = None,
         pattern: re.Pattern[str] | None = None) -> str | None: ...
def text(value: object, name: str, hi: int, *, lo: int = 1, default: str | None = None,
         pattern: re.Pattern[str] | None = None) -> str | None:
    if value is None:
        if default is not None or lo == 0:
            return default
        raise invalid(f"{name} is required", field=name)
    if not isinstance(value, str) or not lo <= len(value) <= hi:
        raise invalid(f"{name} must be a string of {lo}..{hi} characters", field=name)
    if pattern is not None and not pattern.match(value):
        raise invalid(f"{name} {value!r} has characters that are not allowed", field=name)
    return value


def traceparent(value: object) -> str | None:
    """A W3C traceparent (the submitter's trace context: DESIGN 12), or None."""
    if value is None:
        return None
    if not isinstance(value, str) or SV.TRACEPARENT.match(value) is None:
        raise invalid(f"traceparent must be a W3C traceparent of {TRACEPARENT_CHARS} "
                      "characters: 00-<32 hex>-<16 hex>-<2 hex>, ids not all zero",
                      field="traceparent")
    return value


def tenant(value: object, name: str = "tenant", default: str | None = None) -> str:
    out = text(value, name, TENANT_CHARS_MAX, default=default, pattern=TENANT_RE)
    assert out is not None, "text() answers a missing value by the default or refuses it"
    return out


def required_text(value: object, name: str, hi: int, *,
                  pattern: re.Pattern[str] | None = None) -> str:
    """A string of 1..hi characters that must be given."""
    out = text(value, name, hi, pattern=pattern)
    assert out is not None, "text() refuses a missing value without a default (lo is 1)"
    return out


def name(value: object, field: str, hi: int = ID_CHARS_MAX) -> str:
    return required_text(value, field, hi, pattern=NAME_RE)


def sized_text(value: object, name: str, bytes_max: int) -> str:
    """A string whose UTF-8 size is bounded (as the state machine counts it): too big is
    413 `too_large`."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string", field=name)
    if len(value) > bytes_max or len(value.encode("utf-8", "surrogatepass")) > bytes_max:
        raise ApiError("too_large", f"{name} is over {bytes_max} bytes, the limit",
                       {"field": name, "limit": bytes_max})
    return value


ERROR_DETAIL_CHARS_MAX = {"type": API_LIMITS.error_type_chars_max,
                          "message": API_LIMITS.error_message_chars_max,
                          "traceback": API_LIMITS.traceback_chars_max}


def error_text(value: object) -> str:
    """A failure's `error`: a string, or `{type, message, traceback}` (DESIGN 14.1) kept as
    its compact JSON text (keys in that order), so the replicated attempt keeps one string
    bounded by `error_bytes_max`."""
    if not isinstance(value, dict):
        return sized_text(value, "error", ERROR_BYTES_MAX)
    f = Fields(value, "error")
    detail = {}
    for key, chars_max in ERROR_DETAIL_CHARS_MAX.items():
        optional = key != "type"
        detail[key] = text(f.get(key), f"error.{key}", chars_max, lo=0 if optional else 1,
                           default="" if optional else None)
    f.done()
    return sized_text(orjson.dumps(detail).decode(), "error", ERROR_BYTES_MAX)


def body_too_large(content_length: int | None) -> ApiError:
    """413 `too_large` for a request body over BODY_BYTES_MAX (aiohttp refuses it before
    any handler): names the limit, what it applies to, and the size when it was declared."""
    size = f"is {content_length} bytes" if content_length is not None else "is too large"
    return ApiError("too_large", f"request body {size}, the limit is {BODY_BYTES_MAX} bytes "
                    f"for a whole request body (each task payload: {PAYLOAD_BYTES_MAX})",
                    {"status": 413, "field": "body", "limit": BODY_BYTES_MAX})


def json_text(value: object, name: str, limit: int = PAYLOAD_BYTES_MAX) -> str:
    """A JSON value as canonical text (sorted keys), refused if larger than `limit` bytes."""
    try:
        raw = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        raise invalid(f"{name} is not representable as JSON", field=name) from None
    if len(raw) > limit:
        raise ApiError("too_large", f"{name} is {len(raw)} bytes, the limit is {limit}",
                       {"field": name, "limit": limit})
    return raw.decode()


def json_depth(value: object, raw: bytes, limit: int = JSON_DEPTH_MAX) -> None:
    """Refuse a parsed document nested deeper than `limit` arrays/objects."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return      # it cannot be deeper than its number of brackets: no walk needed
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise ApiError("too_large", f"the body is nested deeper than {limit} levels",
                           {"field": "body", "limit": limit})
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))


def instant_ms(value: object, name: str) -> int:
    """RFC 3339 string (with offset) or epoch seconds -> epoch ms."""
    if isinstance(value, str):
        try:
            t = _dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise invalid(f"{name} must be RFC 3339 (e.g. 2026-12-01T15:00:00Z) "
                          "or epoch seconds", field=name) from None
        if t.tzinfo is None:
            raise invalid(f"{name} needs a time zone offset (Z or +hh:mm)", field=name)
        ms = int(t.timestamp() * 1000)
    else:
        ms = round(number(value, name, 0, EPOCH_MS_MAX / 1000) * 1000)
    if not 0 <= ms <= EPOCH_MS_MAX:
        raise invalid(f"{name} is out of range", field=name)
    return ms


def task_id(value: object) -> str:
    return name(value, "task_id")


# --- bodies --------------------------------------------------------------------------------

def batch(body: object, key: str) -> list[object]:
    f = Fields(body)
    items = f.get(key)
    f.done()
    if not isinstance(items, list) or not items:
        raise invalid(f"{key} must be a non-empty list", field=key)
    if len(items) > BATCH_MAX:
        raise ApiError("too_large", f"at most {BATCH_MAX} {key} per request",
                       {"field": key, "limit": BATCH_MAX})
    return items


def empty(body: object) -> None:
    """Action endpoints (cancel, replay, discard) take no fields."""
    if body is None:
        return
    Fields(body).done()


# --- query strings -------------------------------------------------------------------------

def query(q: Mapping[str, str], allowed: tuple[str, ...]) -> None:
    unknown = sorted(k for k in q if k not in allowed)
    if unknown:
        raise invalid(f"unknown query parameter(s): {', '.join(unknown)}", fields=unknown)


@overload
def query_int(q: Mapping[str, str], key: str, lo: int, hi: int, default: int) -> int: ...
@overload
def query_int(q: Mapping[str, str], key: str, lo: int, hi: int, default: None) -> int | None: ...
def query_int(q: Mapping[str, str], key: str, lo: int, hi: int, default: int | None) -> int | None:
    raw = q.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise invalid(f"{key} must be an integer", field=key) from None
    return integer(value, key, lo, hi)


def consistency(q: Mapping[str, str]) -> str:
    value = q.get("consistency", "local")
    if value not in ("local", "linearizable"):
        raise invalid("consistency must be local or linearizable", field="consistency")
    return value


class TaskFilters(TypedDict):
    """The task list's query (the keywords of `StateMachine.list_tasks`)."""
    state: str | None
    tenant: str | None
    task_type: str | None
    schedule_id: str | None
    cursor: str | None
    limit: int
    created_after_ms: int | None
    created_before_ms: int | None
    finished_after_ms: int | None


TASK_FILTERS = ("state", "tenant", "task_type", "schedule_id", "created_after",
                "created_before", "finished_after", "limit", "cursor")


def task_filters(q: Mapping[str, str]) -> TaskFilters:
    state = q.get("state")
    if state is not None and state not in LISTED_STATES:
        raise invalid(f"state must be one of {', '.join(LISTED_STATES)}", field="state")
    out: TaskFilters = {
        "state": state,
        "tenant": tenant(q["tenant"]) if "tenant" in q else None,
        "task_type": name(q["task_type"], "task_type") if "task_type" in q else None,
        "schedule_id": name(q["schedule_id"], "schedule_id") if "schedule_id" in q else None,
        "cursor": text(q["cursor"], "cursor", CURSOR_CHARS_MAX) if "cursor" in q else None,
        "limit": query_int(q, "limit", 1, LIST_LIMIT_MAX, 100),
        "created_after_ms": query_instant_ms(q, "created_after"),
        "created_before_ms": query_instant_ms(q, "created_before"),
        "finished_after_ms": query_instant_ms(q, "finished_after"),
    }
    lo, hi = out["created_after_ms"], out["created_before_ms"]
    if lo is not None and hi is not None and lo > hi:
        raise invalid("created_before must not be earlier than created_after",
                      field="created_before")
    return out


def query_instant_ms(q: Mapping[str, str], key: str) -> int | None:
    """An instant of the query string (RFC 3339 with an offset, or epoch seconds) in ms."""
    raw = q.get(key)
    if raw is None:
        return None
    value: float | str
    try:
        value = float(raw)
    except ValueError:
        value = raw
    return instant_ms(value, key)
