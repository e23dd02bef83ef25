"""The tasks' part of the OpenAPI document: submit, read, list, cancel, replay, discard
(api/tasks.py, api/submission.py) and the schemas of a task."""
from __future__ import annotations

from tsched.statemachine.limits import API_LIMITS, LIMITS

from tsched.node.api import validate as v
from tsched.node.api.openapi.schema import (
    ANY_JSON, APPLIED_SEQ, APPLIED_SEQS, NAME, PRIORITY, READ_PARAMS, SHARD, TASK_TYPE, TENANT,
    TIME, TIME_IN, TIMEOUT_S, WRITE_ERRORS, Fragment, PathItem, Schema, integer, listing_op,
    nullable, number, obj, op, path_param, query, ref, string)

# The submitter's W3C trace context, kept with the task and handed to the worker with each
# claim (DESIGN 12; the client's `otel` extra sets and reads it).
TRACEPARENT = string(v.TRACEPARENT_CHARS, v.TRACEPARENT_CHARS,
                     pattern="^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
                     description="W3C trace context of the submitter (version 00; the ids "
                                 "not all zero); a worker's span of the task is its child")
STATES = list(v.STATES)
LISTED_STATES = list(v.LISTED_STATES)   # and the `retrying` view
TASK_ID = path_param("task_id", "the task's id")
PREFER = {"name": "Prefer", "in": "header", "required": False, "schema": string(1024),
          "description": "`return=minimal` (RFC 7240): each task created, completed or "
          "failed is answered by `MinimalTask`, each claimed task by `ClaimedTask`, and the "
          "answer says `Preference-Applied: return=minimal`"}
ERROR_DETAIL = obj({
    "type": string(v.ERROR_DETAIL_CHARS_MAX["type"], description="the exception's class name"),
    "message": string(v.ERROR_DETAIL_CHARS_MAX["message"], 0),
    "traceback": string(v.ERROR_DETAIL_CHARS_MAX["traceback"], 0,
                        description="its last characters (where the exception was raised)"),
}, ("type",), closed=True, description="a failure's detail (DESIGN 14.1); stored as compact "
                                       f"JSON of at most {v.ERROR_BYTES_MAX} UTF-8 bytes")


def _retry() -> Schema:
    return obj({
        "backoff": {"type": "string", "enum": ["exponential", "linear", "fixed"]},
        "base_s": number(0, v.RETRY_S_MAX),
        "max_s": number(0, v.RETRY_S_MAX),
        "multiplier": number(v.MULTIPLIER_MIN, v.MULTIPLIER_MAX),
        "jitter": number(0, v.JITTER_MAX, "fraction of the delay subtracted at most"),
    }, closed=True)


def _task_submit() -> Schema:
    return obj({
        "task_type": TASK_TYPE,
        "payload": {**ANY_JSON, "description": f"JSON, at most {v.PAYLOAD_BYTES_MAX} bytes "
                    "(larger: 413 too_large)"},
        "tenant": {**TENANT, "default": "default"},
        "priority": PRIORITY,
        "run_at": {**TIME_IN, "description": "RFC 3339 with an offset, or epoch seconds; at "
                   f"most {v.DELAY_S_MAX} s ahead"},
        "delay_s": number(0, v.DELAY_S_MAX, "instead of run_at"),
        "timeout_s": {**TIMEOUT_S, "default": 300},
        "max_retries": {**integer(0, v.MAX_RETRIES_MAX), "default": 3},
        "retry": ref("RetryPolicy"),
        "idempotency_key": string(v.IDEMPOTENCY_KEY_CHARS_MAX),
        "limits": {"type": "array", "maxItems": LIMITS.limits_per_task_max,
                   "items": string(LIMITS.limit_name_chars_max),
                   "description": "names of declared limits (PUT /v1/limits/{name}) this task "
                                  "is claimed under; an unknown name is a 400 naming it"},
        "traceparent": TRACEPARENT,
    }, ("task_type",), closed=True)


def _attempt() -> Schema:
    return obj({
        "attempt": integer(1), "worker_id": string(),
        "fencing_token": integer(0), "started_at": TIME,
        "ended_at": nullable(TIME),
        "outcome": nullable({"type": "string", "enum": [
            "completed", "failed", "lease_expired", "timed_out", "cancelled", "released",
            "rate_limited"]}),
        "error": nullable(string(description='"Type: message" for a detailed error')),
        "error_detail": nullable(ERROR_DETAIL),
    })


# A running task's progress (DESIGN 9): a heartbeat's `progress`, and how a task shows it.
PROGRESS_FIELDS: dict[str, Schema] = {
    "fraction": {"type": "number", "minimum": 0, "maximum": 1,
                 "description": "the fraction done; kept in thousandths"},
    "message": {"type": "string", "maxLength": LIMITS.progress_message_chars_max,
                "default": ""},
}
PROGRESS_SHOWN = obj({**PROGRESS_FIELDS, "at": TIME}, ("fraction", "message", "at"),
                     description="GET /v1/tasks/{id} only: the running attempt's last "
                     "reported progress (a heartbeat's); null when none")


def task() -> Schema:
    return obj({
        "task_id": string(), "tenant": string(), "task_type": string(),
        "state": {"type": "string", "enum": STATES},
        "status": {"type": "string", "enum": LISTED_STATES, "description":
                   "the state, or `retrying` for a pending task whose last attempt failed "
                   "or expired (a view, not a state)"},
        "next_retry_at": nullable({**TIME, "description": "a retrying task's run_at: the end "
                                   "of its backoff"}),
        "payload": ANY_JSON, "priority": integer(0, 10), "run_at": TIME,
        "attempt": integer(0, description="claims so far (1 during the first run)"),
        "max_retries": integer(0), "retry": ref("RetryPolicy"), "timeout_s": {"type": "number"},
        "idempotency_key": nullable(string()), "execution_id": nullable(string()),
        "schedule_id": nullable(string()),
        "lease_expires_at": nullable(TIME),
        "fencing_token": nullable(integer(0)),
        "worker_id": nullable(string()),
        "cancel_requested": {"type": "boolean"},
        "last_error": nullable(string()),
        "result": ANY_JSON,
        "created_at": TIME, "started_at": nullable(TIME), "completed_at": nullable(TIME),
        "attempts": {"type": "array", "items": ref("Attempt")},
        "limits": {"type": "array", "items": string(), "description": "its keyed limits"},
        "traceparent": nullable(TRACEPARENT),
        "limited_by": nullable(obj({
            "limit": string(), "partition": nullable(string()),
            "until": nullable({**TIME, "description": "the earliest it can run; null: when "
                               "a running task of that limit's partition ends"})},
            ("limit", "partition", "until"), description="GET /v1/tasks/{id} only: a pending "
            "task held by a spent limit")),
        "paused": nullable({**ref("Pause"), "description": "GET /v1/tasks/{id} only: the "
                            "pause that keeps this pending task from being claimed "
                            "(POST /v1/queues/pause); null: none"}),
        "progress": nullable(PROGRESS_SHOWN),
        "unclaimed_type": nullable(obj({
            "task_type": string(), "window_s": {"type": "number", "minimum": 0},
            "message": string(description="the hint, for a person")},
            ("task_type", "window_s", "message"), description="GET /v1/tasks/{id} only, as "
            "the leader answers it (a follower leaves it out: read with "
            "`consistency=linearizable`), for a pending task: no worker has asked for its "
            "task type in the last `window_s` seconds; null when one has; advisory, from "
            "the claims the leader saw (not replicated)")),
        "workflow": obj({"workflow_id": string(), "step": string()}, ("workflow_id", "step"),
                        description="a workflow's step: which (GET one task only)"),
        "duplicate": {"type": "boolean", "description": "answers to a submit only"},
        "applied_seq": APPLIED_SEQ, "shard": SHARD,
    }, ("task_id", "tenant", "task_type", "state", "priority", "run_at", "attempt"))


def _schemas() -> dict[str, Schema]:
    return {
        "RetryPolicy": _retry(),
        "TaskSubmit": _task_submit(),
        "Task": task(),
        "MinimalTask": obj({"task_id": string(), "state": {"type": "string", "enum": STATES},
                            "duplicate": {"type": "boolean", "description": "submits only"},
                            "next_retry_at": {**TIME, "description": "failures only, when the "
                                              "task will run again: its run_at, the end of "
                                              "its backoff"},
                            "applied_seq": APPLIED_SEQ, "shard": SHARD},
                           ("task_id", "state"), closed=True,
                           description="a task as `Prefer: return=minimal` answers it"),
        "Attempt": _attempt(),
        "TaskList": obj({"tasks": {"type": "array", "items": ref("Task")},
                         "next_cursor": nullable(string()),
                         "item_cursors": {"type": "array", "items": string(),
                                          "description": "a replica's page: for each task, "
                                          "in order, a cursor whose page starts at it (a "
                                          "router merging shards keeps its place with them)"},
                         "applied_seq": APPLIED_SEQ, "shard": SHARD,
                         "applied_seqs": APPLIED_SEQS},
                        ("tasks",)),
    }


def _submit_op() -> Schema:
    """A submit's 429 `overloaded` says why in `details.reason` (DESIGN 14.2)."""
    task, brief = ref("Task"), ref("MinimalTask")
    submit = {"oneOf": [ref("TaskSubmit"), obj({"tasks": {
        "type": "array", "items": ref("TaskSubmit"), "minItems": 1, "maxItems": v.BATCH_MAX}},
        ("tasks",), closed=True)]}
    submitted = {"oneOf": [task, brief, obj({"tasks": {"type": "array", "items": {
                                                "oneOf": [task, brief, ref("Error")]}},
                                      "applied_seq": APPLIED_SEQ, "shard": SHARD,
                                      "applied_seqs": APPLIED_SEQS},
                               ("tasks",))]}
    out = op("Submit tasks", submitted, status=201, body=submit, errors=WRITE_ERRORS,
             params=[PREFER])
    out["responses"]["429"]["description"] = (
        "`tenant_limit`, or `overloaded` with Retry-After and `details.reason`: "
        "`priority` (live tasks at or above the cluster's shed threshold and the priority "
        f"greater than `shed_priority_above`, default {LIMITS.shed_priority_above}; "
        f"Retry-After {API_LIMITS.shed_retry_after_s}), `queue_full` (this node waits for "
        f"the commit of {API_LIMITS.proposals_waiting_max} commands) or `busy` (this node "
        f"has {API_LIMITS.submits_in_progress_max} submit requests in progress or its "
        f"oldest has waited {API_LIMITS.submit_wait_ms_max} ms); `queue_full` and `busy` "
        f"proposed nothing (Retry-After {API_LIMITS.busy_retry_after_s}, same Idempotency-Key);"
        f" a submit of priorities <= {API_LIMITS.urgent_priority_max} only at "
        f"{API_LIMITS.urgent_bound_factor}x those bounds")
    return out


def _action(summary: str, tag: str = "tasks") -> Schema:
    """cancel, replay, discard: an action on one task, with no fields."""
    return op(summary, ref("Task"), body=obj({}, closed=True), body_required=False,
              params=[TASK_ID], errors=WRITE_ERRORS, tag=tag)


def _list_op() -> Schema:
    """GET /v1/tasks: a page examines a bounded number of tasks (DESIGN 7), and takes a
    token of the node's budget of listing pages."""
    return listing_op("List tasks", ref("TaskList"), params=[
        query("state", {"type": "string", "enum": LISTED_STATES},
              "`retrying`: the pending tasks whose last attempt failed or expired"),
        query("tenant", TENANT), query("task_type", NAME), query("schedule_id", NAME),
        query("created_after", string(), "RFC 3339 or epoch seconds: created at or after"),
        query("created_before", string(), "RFC 3339 or epoch seconds: created before "
              "(not earlier than created_after)"),
        query("finished_after", string(), "RFC 3339 or epoch seconds: a terminal task "
              "finished (completed_at) at or after"),
        query("limit", {**integer(1, v.LIST_LIMIT_MAX), "default": 100}),
        query("cursor", string(512), "next_cursor of the previous page"),
        *READ_PARAMS],
        description="Newest first. A page examines at most "
                    f"{API_LIMITS.task_scan_max} tasks, so it may hold fewer than `limit` "
                    "(even none) and still have a next_cursor: follow it until it is null. "
                    "A task type, schedule, tenant or state has an index of its own; a "
                    "creation window bounds the walk. With shards: merged by creation time. "
                    "A node serves a budget of listing pages a second (429 past it).")


def _paths() -> dict[str, PathItem]:
    task = ref("Task")
    return {
        "/v1/tasks": {
            "post": _submit_op(),
            "get": _list_op(),
        },
        "/v1/tasks/{task_id}": {
            "get": op("Get a task", task, params=[TASK_ID, *READ_PARAMS], errors=(404, 503, 504)),
        },
        "/v1/tasks/{task_id}/cancel": {"post": _action("Cancel a task")},
        "/v1/tasks/{task_id}/replay": {
            "post": _action("Replay a dead-lettered task", tag="dead letters")},
        "/v1/tasks/{task_id}/discard": {
            "post": _action("Discard a dead-lettered task", tag="dead letters")},
    }


def fragment() -> Fragment:
    return Fragment(_paths(), _schemas())
