"""The body of a workflow submit (POST /v1/workflows) checked into a SubmitWorkflow
(DESIGN.md section 5.2): each step's task fields as for a task submit (api/submission.py),
its `deps` and `on_parent_failure`, and the graph (statemachine/graphs.py, which apply
checks again). Every refusal is a 400 that names the step; nothing is proposed."""
from __future__ import annotations

from tsched.statemachine import commands as c
from tsched.statemachine import codec
from tsched.statemachine.graphs import ON_PARENT_FAILURE, compact, deps_by_index
from tsched.statemachine.limits import LIMITS
from tsched.statemachine.records import retry_record
from tsched.statemachine.validate import Rejected

from tsched.node.api import submission
from tsched.node.api.validate import (IDEMPOTENCY_KEY_CHARS_MAX, NAME_RE, Fields, name,
                                      tenant, text, traceparent)
from tsched.node.errors import ApiError, invalid

STEPS_MAX = LIMITS.workflow_steps_max
DEPS_MAX = LIMITS.workflow_deps_max
EDGES_MAX = LIMITS.workflow_edges_max
STEP_NAME_CHARS_MAX = LIMITS.step_name_chars_max
STEP_FIELDS = ("name", "deps", "on_parent_failure")   # a step's fields beyond a task's
NOT_IN_A_STEP = ("tenant", "run_at", "delay_s", "idempotency_key")   # the workflow's own


def parse(body: object, *, now_ms: int, request_id: str, workflow_id: str,
          task_ids: list[str], default_tenant: str) -> c.SubmitWorkflow:
    """`task_ids`: a fresh id per step (as many as `steps_of(body)` has)."""
    f = Fields(body)
    steps = steps_of(body)
    who = tenant(f.get("tenant"), default=default_tenant)
    key = text(f.get("idempotency_key"), "idempotency_key", IDEMPOTENCY_KEY_CHARS_MAX, lo=0,
               pattern=NAME_RE) or None
    trace = traceparent(f.get("traceparent"))
    f.get("steps")
    f.done()
    names, deps, rows = [], [], []
    for i, item in enumerate(steps):
        step_name, parents, rule, task = _step(item, i, now_ms)
        names.append(step_name)
        deps.append(parents)
        rows.append([step_name, task_ids[i], task.task_type, task.payload_json, task.priority,
                     task.timeout_ms, task.max_retries, retry_record(task.retry), (), rule,
                     task.traceparent])
    _edges(deps)
    try:
        indexes = deps_by_index(names, deps)
    except Rejected as r:
        raise ApiError(r.code, r.message, r.details) from None
    whole = [tuple(row[:8]) + (tuple(ix), row[9], row[10]) for row, ix in zip(rows, indexes)]
    return c.SubmitWorkflow(request_id=request_id, now_ms=now_ms, workflow_id=workflow_id,
                            tenant=who, idempotency_key=key, traceparent=trace,
                            **compact(whole))


def check_entry_size(cmd: c.SubmitWorkflow, entry_bytes_max: int) -> None:
    """A workflow is one Raft entry: one over the entry bound is a 413 naming both sizes
    (never proposed: the log would refuse it and the caller would only see a timeout)."""
    size = len(codec.encode_batch([cmd]))
    if size > entry_bytes_max:
        raise ApiError("too_large", f"the workflow takes {size} bytes in the log, at most "
                       f"{entry_bytes_max}: fewer steps or smaller payloads",
                       {"field": "steps", "bytes": size, "limit": entry_bytes_max})


def steps_of(body: object) -> list[object]:
    """The step objects: 1..STEPS_MAX of them (over: a 400 naming the bound)."""
    if not isinstance(body, dict):
        raise invalid("body must be a JSON object")
    steps = body.get("steps")
    if not isinstance(steps, list) or not steps:
        raise invalid("steps must be a non-empty list of step objects", field="steps")
    if len(steps) > STEPS_MAX:
        raise invalid(f"a workflow has at most {STEPS_MAX} steps, this one {len(steps)}",
                      field="steps", limit=STEPS_MAX)
    return steps


def _step(item: object, i: int, now_ms: int) -> tuple[str, list[str], str, c.SubmitTask]:
    where = f"steps[{i}]"
    if not isinstance(item, dict):
        raise invalid(f"{where} must be a JSON object", field=where)
    step_name = name(item.get("name"), f"{where}.name", STEP_NAME_CHARS_MAX)
    try:
        parents = _deps(item.get("deps"), step_name)
        rule = item.get("on_parent_failure") or "cancel"
        if rule not in ON_PARENT_FAILURE:
            raise invalid(f"step {step_name!r}: on_parent_failure must be cancel or run",
                          field="on_parent_failure")
        for key in NOT_IN_A_STEP:
            if key in item:
                raise invalid(f"step {step_name!r}: {key} is not a step's field",
                              field=key)
        task_fields = {k: v for k, v in item.items() if k not in STEP_FIELDS}
        task = submission.submit(task_fields, now_ms=now_ms, request_id="-", task_id="-",
                                 where=where)
    except ApiError as e:
        raise ApiError(e.code, e.message, {**e.details, "step": step_name}) from None
    return step_name, parents, rule, task


def _deps(value: object, step_name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(d, str) for d in value):
        raise invalid(f"step {step_name!r}: deps must be a list of step names", field="deps")
    if len(value) > DEPS_MAX:
        raise invalid(f"step {step_name!r} has {len(value)} deps, at most {DEPS_MAX}",
                      field="deps", limit=DEPS_MAX)
    return value


def _edges(deps: list[list[str]]) -> None:
    total = sum(len(d) for d in deps)
    if total > EDGES_MAX:
        raise invalid(f"a workflow has at most {EDGES_MAX} deps in all, this one {total}",
                      field="steps", limit=EDGES_MAX)
