"""The body of a task submission (POST /v1/tasks, one task or a batch; a schedule's retry
policy) checked, bounded and made into a SubmitTask command (DESIGN.md section 7);
`parse_submit`, the one parse of a submit (its body and headers) into a `SubmitRequest`."""
from __future__ import annotations

from aiohttp import web

from tsched.statemachine import commands as c

from tsched.node.api.validate import (BATCH_MAX, DELAY_S_MAX, IDEMPOTENCY_KEY_CHARS_MAX,
                                      JITTER_MAX, MAX_RETRIES_MAX, MULTIPLIER_MAX, MULTIPLIER_MIN,
                                      NAME_RE, PRIORITY_MAX, RETRY_S_MAX, TASK_TYPE_CHARS_MAX,
                                      TIMEOUT_S_MAX, TIMEOUT_S_MIN, Fields, L, instant_ms, integer,
                                      json_text, name, number, seconds_ms, tenant, text,
                                      traceparent)
from tsched.node.api.idempotency import request_id, request_ids
from tsched.node.api.keyed_limits import limit_names
from tsched.node.api.jsonio import prefers_minimal
from tsched.node.api.scope import tenant_scope
from tsched.node.errors import ApiError, invalid
from tsched.node.scheduling.submits import SubmitRequest
from tsched.node.services import Node


# Frozen, so one instance serves every submit without a policy (building one per task was
# a fifth of validating a submit).
_DEFAULT_RETRY = c.RetryPolicy()


def parse_submit(request: web.Request, body: object, node: Node) -> SubmitRequest:
    """POST /v1/tasks: the body (one task, or a batch's, request ids `#i` under the
    request's own) and the headers, the one parse of a submit at a node."""
    items = submit_batch(body)
    now = node.clock.now_ms()
    scope = tenant_scope(request)
    minimal = prefers_minimal(request)
    # A tenant token's task without `tenant` is for the token's tenant.
    default_tenant = "default" if scope is None else scope
    if items is None:
        cmd = submit(body, now_ms=now, request_id=request_id(request),
                     task_id=node.new_task_id(), default_tenant=default_tenant)
        return SubmitRequest(commands=(cmd,), priorities=(cmd.priority,), tenant=scope,
                             minimal=minimal)
    rid = request_ids(request)
    cmds = tuple([submit(item, now_ms=now, request_id=rid(f"#{i}"), task_id=node.new_task_id(),
                         where=f"tasks[{i}]", default_tenant=default_tenant)
                  for i, item in enumerate(items)])
    return SubmitRequest(commands=cmds, priorities=tuple([cmd.priority for cmd in cmds]),
                         tenant=scope, batch=True, minimal=minimal)


def retry_policy(value: object) -> c.RetryPolicy:
    if value is None:
        return _DEFAULT_RETRY
    f = Fields(value, "retry")
    d = _DEFAULT_RETRY
    backoff = f.get("backoff")
    if backoff is not None and backoff not in ("exponential", "linear", "fixed"):
        raise invalid("retry.backoff must be exponential, linear or fixed", field="retry.backoff")
    base_ms = seconds_ms(f.get("base_s"), "retry.base_s", 0, RETRY_S_MAX, d.base_ms)
    max_ms = seconds_ms(f.get("max_s"), "retry.max_s", 0, RETRY_S_MAX, d.max_ms)
    mult = number(f.get("multiplier"), "retry.multiplier", MULTIPLIER_MIN, MULTIPLIER_MAX,
                  d.multiplier_milli / 1000)
    jitter = number(f.get("jitter"), "retry.jitter", 0, JITTER_MAX, d.jitter_permille / 1000)
    f.done()
    if max_ms < base_ms:
        raise invalid("retry.max_s must be >= retry.base_s", field="retry.max_s")
    return c.RetryPolicy(backoff=backoff or d.backoff, base_ms=base_ms, max_ms=max_ms,
                         multiplier_milli=round(mult * 1000), jitter_permille=round(jitter * 1000))


def submit(body: object, *, now_ms: int, request_id: str, task_id: str,
           where: str = "body", default_tenant: str = "default") -> c.SubmitTask:
    """One task's fields checked into its command; `default_tenant` when it names none
    (a tenant token's own tenant)."""
    f = Fields(body, where)
    run_at_ms = None
    if f.has("run_at") and f.has("delay_s"):
        raise invalid("give run_at or delay_s, not both", field="delay_s")
    if f.has("run_at"):
        run_at_ms = run_at(f.get("run_at"), now_ms)
    elif f.has("delay_s"):
        run_at_ms = now_ms + seconds_ms(f.get("delay_s"), "delay_s", 0, DELAY_S_MAX, 0)
    cmd = c.SubmitTask(
        request_id=request_id, now_ms=now_ms, task_id=task_id,
        task_type=name(f.get("task_type"), "task_type", TASK_TYPE_CHARS_MAX),
        tenant=tenant(f.get("tenant"), default=default_tenant),
        payload_json=json_text(f.get("payload"), "payload"),
        priority=integer(f.get("priority"), "priority", 0, PRIORITY_MAX, default=5),
        run_at_ms=run_at_ms,
        timeout_ms=timeout_ms(f.get("timeout_s"), 300_000),
        max_retries=integer(f.get("max_retries"), "max_retries", 0, MAX_RETRIES_MAX, default=3),
        retry=retry_policy(f.get("retry")),
        idempotency_key=text(f.get("idempotency_key"), "idempotency_key",
                             IDEMPOTENCY_KEY_CHARS_MAX, lo=0, pattern=NAME_RE) or None,
        limits=limit_names(f.get("limits")),
        traceparent=traceparent(f.get("traceparent")),
    )
    f.done()
    return cmd


def run_at(value: object, now_ms: int) -> int:
    """An instant at most `DELAY_S_MAX` ahead of `now_ms` (the state machine's bound)."""
    ms = instant_ms(value, "run_at")
    if ms > now_ms + L.run_at_ahead_ms_max:
        raise invalid(f"run_at is more than {DELAY_S_MAX // 86_400} days ahead",
                      field="run_at")
    return ms


def timeout_ms(value: object, default_ms: int) -> int:
    return seconds_ms(value, "timeout_s", TIMEOUT_S_MIN, TIMEOUT_S_MAX, default_ms)


def submit_batch(body: object) -> list[object] | None:
    """The task objects of a batch submit, or None when the body is one task."""
    if not isinstance(body, dict):
        raise invalid("body must be a JSON object")
    if "tasks" not in body:
        return None
    f = Fields(body)
    items = f.get("tasks")
    f.done()
    if not isinstance(items, list) or not items:
        raise invalid("tasks must be a non-empty list", field="tasks")
    if len(items) > BATCH_MAX:
        raise ApiError("too_large", f"at most {BATCH_MAX} tasks per batch",
                       {"field": "tasks", "limit": BATCH_MAX})
    return items
