"""The workers' request bodies (DESIGN.md sections 5, 5.1 and 7): a claim's (its
`priority_min` / `priority_max` or `tier_weights`, the completions it carries), a heartbeat's
and a completion's or failure's (its `retry_after_s`)."""
from __future__ import annotations

import math
from collections.abc import Callable

from aiohttp import web

from tsched.statemachine.limits import LIMITS, SECOND_MS
from tsched.statemachine.tiers import DEFAULT_TIERS, Tier

from tsched.node.api.validate import (BATCH_MAX, CLAIM_TASKS_MAX, LEASE_S_MAX, LEASE_S_MIN,
                                      PREFETCH_MS_MAX, RESULT_BYTES_MAX, TASK_TYPE_CHARS_MAX,
                                      TASK_TYPES_MAX, WAIT_S_MAX, FENCING_TOKEN_MAX,
                                      WORKER_SLOTS_MAX, Fields,
                                      boolean, error_text, integer, json_text, number,
                                      seconds_ms, task_id, text)
from tsched.node.api.validate import name as _name
from tsched.node.api.idempotency import request_ids
from tsched.node.api.jsonio import prefers_minimal
from tsched.node.api.scope import tenant_scope
from tsched.node.errors import ApiError, invalid
from tsched.node.forwarding import FORWARDED_HEADER
from tsched.node.scheduling.claim_request import ClaimRequest, CompletionItem, HeartbeatItem
from tsched.node.scheduling.worker_slots import SlotReport

PRIORITY_MAX = LIMITS.priority_max
RETRY_AFTER_S_MAX = LIMITS.backoff_ms_max // SECOND_MS
TIER_WEIGHT_MAX = LIMITS.tier_weight_max
PROGRESS_PERMILLE_MAX = LIMITS.progress_permille_max
PROGRESS_MESSAGE_CHARS_MAX = LIMITS.progress_message_chars_max

KEY_HEADER = "Idempotency-Key"
WATCH_HEADER = "X-Tsched-Claim-Watch"   # the router's watch: leases nothing (DESIGN 13)
HEAD_HEADER = "X-Tsched-Claim-Head"     # the router's head read: nothing leased, no wait


def _priority(value: object, name: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= PRIORITY_MAX:
        raise invalid(f"{name} must be an integer in 0..{PRIORITY_MAX}", field=name)
    return value


def priorities(lo_value: object, hi_value: object) -> tuple[int, int]:
    """A claim's inclusive effective-priority range; default the whole range."""
    lo = _priority(lo_value, "priority_min", 0)
    hi = _priority(hi_value, "priority_max", PRIORITY_MAX)
    if lo > hi:
        raise invalid(f"priority_max ({hi}) is below priority_min ({lo})", field="priority_max")
    return lo, hi


Weights = tuple[tuple[int, int, int], ...]


def claim_tiers(lo_value: object, hi_value: object, weights_value: object,
                tiers: tuple[Tier, ...] = DEFAULT_TIERS) -> tuple[tuple[int, int], Weights]:
    """A claim's `priorities` (inclusive range) and `tier_weights` ((lo, hi, weight) per
    named tier of the cluster's table, most urgent first; () when absent). Weights and a
    range exclude each other."""
    prio = priorities(lo_value, hi_value)
    if weights_value is None:
        return prio, ()
    if lo_value is not None or hi_value is not None:
        raise invalid("tier_weights cannot be given with priority_min / priority_max",
                      field="tier_weights")
    return prio, tier_weights(weights_value, tiers)


def tier_weights(value: object, tiers: tuple[Tier, ...] = DEFAULT_TIERS) -> Weights:
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


def retry_after_ms(value: object) -> int:
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

def lease_ms(value: object) -> int:
    return seconds_ms(value, "lease_s", LEASE_S_MIN, LEASE_S_MAX, 30_000)


def claim(body: object, tiers: tuple[Tier, ...] = DEFAULT_TIERS, *, tenant: str | None = None,
          watch: bool = False, head: bool = False, forwarded: bool = False,
          minimal: bool = False, keyed: bool = False,
          ids: Callable[[], Callable[[str], str]] | None = None) -> ClaimRequest:
    """A claim's body checked; `tiers`, the cluster's table, names tier_weights' tiers.
    The rest (the caller's scope, the headers' part) comes from `parse_claim`: `keyed`, the
    request has an Idempotency-Key; `ids()`, its request ids (api/idempotency.py), asked
    once the body is known good."""
    f = Fields(body)
    types = f.get("task_types")
    if not isinstance(types, list) or not 1 <= len(types) <= TASK_TYPES_MAX:
        raise invalid(f"task_types must be a list of 1..{TASK_TYPES_MAX} task types",
                      field="task_types")
    worker_id = _name(f.get("worker_id"), "worker_id")
    task_types = tuple(sorted({_name(t, "task_types[]", TASK_TYPE_CHARS_MAX) for t in types}))
    max_tasks = integer(f.get("max_tasks"), "max_tasks", 1, CLAIM_TASKS_MAX, default=1)
    wait_s = number(f.get("wait_s"), "wait_s", 0, WAIT_S_MAX, default=0)
    lease = lease_ms(f.get("lease_s"))
    prefetch_ms = integer(f.get("prefetch_ms"), "prefetch_ms", 0, PREFETCH_MS_MAX, default=0)
    completions = claim_completions(f.get("completions"))
    prio, weights = claim_tiers(f.get("priority_min"), f.get("priority_max"),
                                f.get("tier_weights"), tiers)
    slots = worker_slots(f.get("slots"), "slots", task_types)
    f.done()
    if completions and watch:
        raise invalid("a watch (X-Tsched-Claim-Watch) carries no completions")
    if completions and head:
        raise invalid("a head read (X-Tsched-Claim-Head) carries no completions",
                      field="completions")
    rid_base: str | None = None
    completion_ids: tuple[str, ...] = ()
    if ids is not None and not head and (keyed or completions is not None):
        # a head read leases nothing: no request ids (nor their key's check)
        rid = ids()
        rid_base = rid("#claim") if keyed else None
        completion_ids = tuple(rid(f"#c{i}") for i in range(len(completions or ())))
    return ClaimRequest(worker_id=worker_id, task_types=task_types, max_tasks=max_tasks,
                        wait_s=wait_s, lease_ms=lease, prefetch_ms=prefetch_ms,
                        priorities=prio, tier_weights=weights, completions=completions,
                        completion_ids=completion_ids, tenant=tenant, watch=watch, head=head,
                        forwarded=forwarded, rid_base=rid_base, minimal=minimal,
                        slots=slots)


def worker_slots(value: object, where: str, task_types: tuple[str, ...]) -> SlotReport | None:
    """A worker's `slots` {total: 1..WORKER_SLOTS_MAX, busy: {task type: slots}} (busy
    optional; its types among `task_types`, its sum at most total); None when absent."""
    if value is None:
        return None
    f = Fields(value, where)
    total = integer(f.get("total"), f"{where}.total", 1, WORKER_SLOTS_MAX)
    busy = f.get("busy") if f.has("busy") else {}
    f.done()
    if not isinstance(busy, dict):
        raise invalid(f"{where}.busy must be an object: task type -> busy slots",
                      field=f"{where}.busy")
    unknown = sorted(set(busy) - set(task_types))
    if unknown:
        raise invalid(f"{where}.busy names task types the worker does not serve: "
                      f"{', '.join(unknown)[:200]}", field=f"{where}.busy")
    counts = tuple(sorted((t, integer(n, f"{where}.busy", 0, total)) for t, n in busy.items()))
    if sum(n for _, n in counts) > total:
        raise invalid(f"{where}.busy adds up to more than {where}.total ({total})",
                      field=f"{where}.busy")
    return SlotReport(total, tuple((t, n) for t, n in counts if n))


def heartbeat_slots(value: object) -> tuple[str, tuple[str, ...], SlotReport] | None:
    """A heartbeat batch's `slots`: {worker_id, task_types} and a claim's slots fields;
    (worker id, task types, report) or None when absent."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid("slots must be a JSON object", field="slots")
    rest = dict(value)
    worker_id = _name(rest.pop("worker_id", None), "slots.worker_id")
    types = rest.pop("task_types", None)
    if not isinstance(types, list) or not 1 <= len(types) <= TASK_TYPES_MAX:
        raise invalid(f"slots.task_types must be a list of 1..{TASK_TYPES_MAX} task types",
                      field="slots.task_types")
    task_types = tuple(sorted({_name(t, "slots.task_types[]", TASK_TYPE_CHARS_MAX)
                               for t in types}))
    report = worker_slots(rest, "slots", task_types)
    assert report is not None, "a dict is a report or a refusal"
    return worker_id, task_types, report


def parse_claim(request: web.Request, body: object, tiers: tuple[Tier, ...]) -> ClaimRequest:
    """POST /v1/claims: the body and the headers, the one parse of a claim at a node."""
    headers = request.headers
    watch, head = headers.get(WATCH_HEADER) == "1", headers.get(HEAD_HEADER) == "1"
    return claim(body, tiers, tenant=tenant_scope(request), watch=watch, head=head,
                 forwarded=bool(headers.get(FORWARDED_HEADER)),
                 minimal=not head and prefers_minimal(request),
                 keyed=bool(headers.get(KEY_HEADER)), ids=lambda: request_ids(request))


def claim_completions(items: object) -> tuple[CompletionItem, ...] | None:
    """A claim's `completions` (those of `POST /v1/completions`); None when absent, and
    an empty list allowed (a worker with nothing to report sends the same shape)."""
    if items is None:
        return None
    if not isinstance(items, list):
        raise invalid("completions must be a list", field="completions")
    if len(items) > BATCH_MAX:
        raise ApiError("too_large", f"at most {BATCH_MAX} completions per request",
                       {"field": "completions", "limit": BATCH_MAX})
    return tuple(completion(it, f"completions[{i}]") for i, it in enumerate(items))


def fencing_token(value: object) -> int:
    if value is None:
        raise invalid("fencing_token is required", field="fencing_token")
    return integer(value, "fencing_token", 0, FENCING_TOKEN_MAX)


def heartbeat(body: object, where: str = "body", path_task_id: str = "") -> HeartbeatItem:
    """A heartbeat: a batch item names its task; one at its own endpoint does not (its
    path's task id, checked after the body). It may carry the handler's `progress`."""
    f = Fields(body, where)
    token = fencing_token(f.get("fencing_token"))
    lease = lease_ms(f.get("lease_s"))
    tid = task_id(f.get("task_id")) if where != "body" else ""
    permille, message = progress(f.get("progress"), f"{where}.progress" if where != "body"
                                 else "progress")
    f.done()
    if where == "body":
        tid = task_id(path_task_id)
    return HeartbeatItem(task_id=tid, fencing_token=token, lease_ms=lease,
                         progress_permille=permille, progress_message=message)


def progress(value: object, where: str) -> tuple[int, str]:
    """A heartbeat's `progress` {fraction in 0..1, message (optional, at most
    PROGRESS_MESSAGE_CHARS_MAX characters)} -> (thousandths, message); (-1, "") when absent.
    The state keeps thousandths: no floats in replicated state."""
    if value is None:
        return -1, ""
    f = Fields(value, where)
    fraction = number(f.get("fraction"), f"{where}.fraction", 0, 1)
    message = text(f.get("message"), f"{where}.message", PROGRESS_MESSAGE_CHARS_MAX, lo=0,
                   default="")
    f.done()
    return round(fraction * PROGRESS_PERMILLE_MAX), message


def completion(body: object, where: str = "body", *, failing: bool | None = None,
               path_task_id: str = "") -> CompletionItem:
    """complete ({fencing_token, result}) or fail ({fencing_token, error, retryable}).

    `failing` None (batch items) decides by the fields present. A batch item names its
    task; one at its own endpoint does not (its path's task id, checked after the body)."""
    f = Fields(body, where)
    if failing is None:
        fields = f.body   # the body, checked to be an object
        failing = "error" in fields or "retryable" in fields or "retry_after_s" in fields
        if failing and "result" in fields:
            raise invalid(f"{where} has both result and error", field="result")
    token = fencing_token(f.get("fencing_token"))
    tid = task_id(f.get("task_id")) if where != "body" else ""
    error, retryable, retry_after, result = "", True, 0, ""
    if failing:
        error = error_text(f.get("error"))
        retryable = boolean(f.get("retryable"), "retryable", True)
        retry_after = retry_after_ms(f.get("retry_after_s"))
    else:
        result = json_text(f.get("result"), "result", RESULT_BYTES_MAX)
    f.done()
    if where == "body":
        tid = task_id(path_task_id)
    return CompletionItem(task_id=tid, fencing_token=token, failing=failing,
                          result_json=result, error=error, retryable=retryable,
                          retry_after_ms=retry_after)
