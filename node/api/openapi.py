"""The OpenAPI 3.1 document of the HTTP API (DESIGN.md section 7), served at /v1/openapi.json.

Built once from plain dicts. Bounds come from `validate.py`, so the document states the
limits the node actually enforces. `tests/unit/node/api/test_openapi.py` checks that every route the
app serves is documented here and every documented route is served.
"""
from __future__ import annotations

import functools
from typing import Any

import orjson

from tsched.statemachine.limits import API_LIMITS, LIMITS

from tsched.node.api import openapi_audit, openapi_members, openapi_ranges as R
from tsched.node.api import schedules as schedules_api
from tsched.node.api.openapi_archive import archive_paths
from tsched.node.scheduling import cron
from tsched.node.api import validate as v
from tsched.node.api.jsonio import STATUS_BY_CODE

OPENAPI_VERSION = "3.1.0"
API_VERSION = "1"

Schema = dict[str, Any]


# --- schema helpers --------------------------------------------------------------------------

def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    return {"oneOf": [schema, {"type": "null"}]}


def obj(props: dict[str, Schema], required: tuple[str, ...] = (), *, closed: bool = False,
        description: str | None = None) -> Schema:
    out: Schema = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    if closed:
        # Requests: unknown fields are refused with invalid_argument.
        out["additionalProperties"] = False
    if description:
        out["description"] = description
    return out


def integer(lo: int | None = None, hi: int | None = None, description: str | None = None) -> Schema:
    out: Schema = {"type": "integer"}
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    if description:
        out["description"] = description
    return out


def number(lo: float, hi: float, description: str | None = None) -> Schema:
    out: Schema = {"type": "number", "minimum": lo, "maximum": hi}
    if description:
        out["description"] = description
    return out


def string(hi: int | None = None, lo: int | None = None, description: str | None = None,
           **extra: Any) -> Schema:
    out: Schema = {"type": "string", **extra}
    if lo is not None:
        out["minLength"] = lo
    if hi is not None:
        out["maxLength"] = hi
    if description:
        out["description"] = description
    return out


TIME = {"type": "string", "format": "date-time", "description": "RFC 3339, UTC in responses"}
TIME_IN = {"oneOf": [{"type": "string", "format": "date-time"}, {"type": "number", "minimum": 0}],
           "description": "RFC 3339 with an offset, or epoch seconds"}
ANY_JSON = {"description": "any JSON value"}
STATES = list(v.STATES)
LISTED_STATES = list(v.LISTED_STATES)   # and the `retrying` view
NAME = string(v.ID_CHARS_MAX, 1)
TENANT = string(v.TENANT_CHARS_MAX, 1, pattern=v._TENANT_RE.pattern)
TASK_TYPE = string(v.TASK_TYPE_CHARS_MAX, 1)
PRIORITY = {**integer(0, v.PRIORITY_MAX), "default": 5}
TIMEOUT_S = number(v.TIMEOUT_S_MIN, v.TIMEOUT_S_MAX)
FENCING_TOKEN = integer(0, v.FENCING_TOKEN_MAX)
RESULT = {**ANY_JSON, "description": f"JSON, at most {v.RESULT_BYTES_MAX} bytes"}
ERROR_DETAIL = obj({
    "type": string(v.ERROR_DETAIL_CHARS_MAX["type"], description="the exception's class name"),
    "message": string(v.ERROR_DETAIL_CHARS_MAX["message"], 0),
    "traceback": string(v.ERROR_DETAIL_CHARS_MAX["traceback"], 0,
                        description="its last characters (where the exception was raised)"),
}, ("type",), closed=True, description="a failure's detail (DESIGN 14.1); stored as compact "
                                       f"JSON of at most {v.ERROR_BYTES_MAX} UTF-8 bytes")
ERROR = {"oneOf": [string(v.ERROR_CHARS_MAX, 0,
                          description=f"at most {v.ERROR_BYTES_MAX} UTF-8 bytes"),
                   ERROR_DETAIL]}
APPLIED_SEQ = integer(0, description="state machine batches applied on the answering node")
# With several shards (DESIGN.md section 13) an answer names its shard; answers merged from
# several shards carry each one's applied_seq instead of one.
SHARD = {"type": "integer", "minimum": 0, "maximum": 63,
         "description": "the shard that answered (only in a cluster with several shards)"}
APPLIED_SEQS = {"type": "object", "additionalProperties": {"type": "integer"},
                "description": "shard -> its applied_seq, in answers merged from several "
                               "shards"}


# --- components ------------------------------------------------------------------------------

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
    }, ("task_type",), closed=True)


def _attempt() -> Schema:
    return obj({
        "attempt": integer(1), "worker_id": string(),
        "fencing_token": integer(0), "started_at": TIME,
        "ended_at": nullable(TIME),
        "outcome": nullable({"type": "string", "enum": [
            "completed", "failed", "lease_expired", "timed_out", "cancelled", "released"]}),
        "error": nullable(string(description='"Type: message" for a detailed error')),
        "error_detail": nullable(ERROR_DETAIL),
    })


def _task() -> Schema:
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
        "duplicate": {"type": "boolean", "description": "answers to a submit only"},
        "applied_seq": APPLIED_SEQ, "shard": SHARD,
    }, ("task_id", "tenant", "task_type", "state", "priority", "run_at", "attempt"))


CLAIMED_FIELDS = ("task_id", "tenant", "task_type", "state", "payload", "run_at", "attempt",
                  "max_retries", "timeout_s", "execution_id", "schedule_id",
                  "lease_expires_at", "fencing_token", "worker_id")


def _claimed_task() -> Schema:
    whole = _task()["properties"]
    return obj({**{k: whole[k] for k in CLAIMED_FIELDS}, "shard": SHARD}, CLAIMED_FIELDS,
               closed=True, description="a claimed task as `Prefer: return=minimal` "
               "answers it: what a worker needs to run it")


def _error() -> Schema:
    return obj({"error": obj({
        "code": {"type": "string", "enum": sorted(STATUS_BY_CODE)},
        "message": string(),
        "details": {"type": "object"},
    }, ("code", "message")), "applied_seq": APPLIED_SEQ, "shard": SHARD}, ("error",))


def _claim() -> Schema:
    return obj({
        "worker_id": NAME,
        "task_types": {"type": "array", "items": TASK_TYPE, "minItems": 1,
                       "maxItems": v.TASK_TYPES_MAX},
        "max_tasks": {**integer(1, v.CLAIM_TASKS_MAX), "default": 1},
        "wait_s": {**number(0, v.WAIT_S_MAX), "default": 0},
        "lease_s": {**number(v.LEASE_S_MIN, v.LEASE_S_MAX), "default": 30}, **R.CLAIM_RANGE,
        "prefetch_ms": {**integer(0, v.PREFETCH_MS_MAX), "default": 0,
                        "description": "early dispatch: tasks due within this horizon"},
        "completions": {"type": "array", "items": _completion_item(), "maxItems": v.BATCH_MAX,
                        "description": "as in POST /v1/completions: applied at once, "
                                       "before the claim (in its Raft entry when it is "
                                       "dispatched at once); answered in order in the "
                                       "answer's `completions`"},
    }, ("worker_id", "task_types"), closed=True)


def _heartbeat_item(batch: bool) -> Schema:
    props = {"fencing_token": FENCING_TOKEN,
             "lease_s": {**number(v.LEASE_S_MIN, v.LEASE_S_MAX), "default": 30}}
    if batch:
        props = {"task_id": NAME, **props}
    return obj(props, ("task_id", "fencing_token") if batch else ("fencing_token",), closed=True)


def _completion_item() -> Schema:
    done = obj({"task_id": NAME, "fencing_token": FENCING_TOKEN, "result": RESULT},
               ("task_id", "fencing_token"), closed=True)
    failed = obj({"task_id": NAME, "fencing_token": FENCING_TOKEN, "error": ERROR,
                  **R.FAIL_FIELDS},
                 ("task_id", "fencing_token"), closed=True)
    return {"oneOf": [done, failed]}


def _schedule_put() -> Schema:
    template = obj({
        "task_type": TASK_TYPE,
        "payload": {**ANY_JSON, "description": f"JSON, at most {v.PAYLOAD_BYTES_MAX} bytes"},
        "priority": PRIORITY,
        "timeout_s": TIMEOUT_S,
        "max_retries": integer(0, v.MAX_RETRIES_MAX),
        "retry": ref("RetryPolicy"),
    }, ("task_type",), closed=True)
    # A schedule as GET shows it may be PUT back: its read-only fields are accepted, ignored.
    echoed = {k: {"readOnly": True, "description": "accepted and ignored"}
              for k in schedules_api._ECHOED}
    return obj({
        "schedule_id": {**NAME, "description": "must equal the path's, when given"},
        "tenant": {**TENANT, "default": "default"},
        "cron": string(cron.EXPR_CHARS_MAX, 1, "5 fields, or 6 with seconds first; @daily etc.; L W # H"),
        "timezone": {**string(cron.ZONE_CHARS_MAX, 1), "default": "UTC",
                     "description": "IANA zone"},
        "task": template,
        "overlap": {"type": "string", "enum": list(schedules_api.OVERLAPS),
                    "default": "allow"},
        "misfire": {"type": "string", "enum": list(schedules_api.MISFIRES),
                    "default": "run_all"},
        "catchup_window_s": {**number(0, schedules_api.CATCHUP_WINDOW_S_MAX), "default": 60},
        "paused": {"type": "boolean", "default": False},
        "start_at": TIME_IN,
        "end_at": TIME_IN,
        "jitter_s": {**number(0, schedules_api.JITTER_S_MAX), "default": 0},
        **{k: val for k, val in echoed.items() if k != "schedule_id"},
    }, ("cron", "task"), closed=True)


def _schedule() -> Schema:
    outcomes = ["ran", "skipped", "missed"]
    fire = obj({"fire_at": TIME, "outcome": {"type": "string", "enum": outcomes},
                "task_id": nullable(string())})
    return obj({
        "schedule_id": string(), "tenant": string(), "cron": string(), "timezone": string(),
        "task": {"type": "object"},
        "overlap": string(), "misfire": string(), "catchup_window_s": {"type": "number"},
        "paused": {"type": "boolean"},
        "start_at": nullable(TIME), "end_at": nullable(TIME), "jitter_s": {"type": "number"},
        "next_fire_at": nullable(TIME),
        "fires": {"type": "array", "items": fire, "description": "recent fires, newest last"},
        "created_at": TIME, "updated_at": TIME,
        "fired_task": {**nullable(ref("Task")),
                       "description": "trigger only: the occurrence it created (null when "
                                      "the overlap policy skipped it)"},
        "applied_seq": APPLIED_SEQ, "shard": SHARD,
    }, ("schedule_id", "tenant", "cron", "timezone", "next_fire_at", "fires"))


def _tenant() -> Schema:
    return obj({"tenant": string(), "max_running": integer(0, description="0: unlimited"),
                "weight": integer(1), "running": integer(0), "pending": integer(0),
                "applied_seq": APPLIED_SEQ, "shard": SHARD},
               ("tenant", "max_running", "weight", "running", "pending"))


def _node_status(own: bool) -> Schema:
    props = {"id": string(), "http": string(), "raft": string(),
             "role": nullable(string(description="leader, follower or candidate")),
             "term": nullable(integer(0)),
             "commit_index": nullable(integer(0)), "applied_seq": nullable(integer(0)),
             "digest": nullable(string()), "reachable": {"type": "boolean"}}
    if own:
        props.update(leader=nullable(string()), applied_seq=APPLIED_SEQ, shard=SHARD,
                     ready={"type": "boolean", "description": "a leader whose barrier applied"},
                     waiting_claims=integer(0, description="long polls waiting here"))
    return obj(props, ("id", "role", "reachable"))


def _cluster() -> Schema:
    nodes = {"type": "array", "items": _node_status(own=False)}
    shard = obj({"shard": integer(0), "leader": nullable(string()),
                 "term": nullable(integer(0)), "nodes": nodes}, ("shard", "leader", "nodes"))
    return obj({"leader": nullable(string()), "term": nullable(integer(0)), "nodes": nodes,
                "shards": {"type": "array", "items": shard,
                           "description": "every shard, in a cluster with several; the "
                                          "top-level leader, term and nodes are shard 0's"},
                "tiers": {"type": "array", "items": _tier(),
                          "description": "the priority tiers (DESIGN 5.1), in order"},
                "applied_seq": APPLIED_SEQ, "shard": SHARD}, ("leader", "term", "nodes", "tiers"))


def _tier() -> Schema:
    return obj({"name": string(), "priority_min": integer(0, 10), "priority_max": integer(0, 10),
                "sla_s": nullable({"type": "number", "description": "null: best effort"})},
               ("name", "priority_min", "priority_max", "sla_s"))


def _stats() -> Schema:
    counts = {"type": "object", "additionalProperties": {"type": "integer"}}
    return obj({
        "by_state": counts,
        "by_priority": {**counts, "description": "pending tasks by priority"},
        "by_tenant": {"type": "object", "additionalProperties": counts,
                      "description": "tenant -> state -> count"},
        "oldest_claimable_age_s": nullable({"type": "number"}),
        "waiting_claims": nullable(integer(0)),
        "schedules": nullable(integer(0)),
        "applied_seq": APPLIED_SEQ, "shard": SHARD,
        "by_shard": {"type": "object", "additionalProperties": counts,
                     "description": "shard -> state -> count (several shards only)"},
        "applied_seqs": APPLIED_SEQS,
    }, ("by_state", "by_priority", "by_tenant"))


def _timeseries() -> Schema:
    counts = {"type": "array", "items": integer(0)}
    gauge = {"type": "array", "items": nullable({"type": "number"})}
    return obj({
        "step_s": {"type": "integer", "enum": [1, 60]},
        "points_max": integer(1, description="the most points an answer holds (one hour)"),
        "start": nullable(integer(0, description="epoch second of the first point (the "
                                                 "i-th is at start + i * step_s); null: none")),
        "submitted": {**counts, "description": "tasks created per point"},
        "completed": {**counts, "description": "tasks completed per point"},
        "failed": {**counts, "description": "attempts reported failed per point"},
        "dead_lettered": {**counts, "description": "tasks moved to dead_letter per point"},
        "lateness_p50_ms": {**gauge, "description": "claim lateness p50; null: no claim"},
        "lateness_p99_ms": {**gauge, "description": "claim lateness p99 (shards: the highest)"},
        "lateness_p99_ms_by_tier": {"type": "object", "additionalProperties": gauge,
                                    "description": "tier name -> its claims' lateness p99"},
        "queue_depth": {**gauge, "description": "pending tasks at the point's last sample"},
    }, ("step_s", "points_max", "start", "submitted", "completed", "failed", "dead_lettered",
        "lateness_p50_ms", "lateness_p99_ms", "lateness_p99_ms_by_tier", "queue_depth"))


def components() -> dict[str, Schema]:
    return {
        "Error": _error(),
        "RetryPolicy": _retry(),
        "TaskSubmit": _task_submit(),
        "Task": _task(),
        "ClaimedTask": _claimed_task(),
        "MinimalTask": obj({"task_id": string(), "state": {"type": "string", "enum": STATES},
                            "duplicate": {"type": "boolean", "description": "submits only"},
                            "applied_seq": APPLIED_SEQ, "shard": SHARD},
                           ("task_id", "state"), closed=True,
                           description="a task as `Prefer: return=minimal` answers it"),
        "Attempt": _attempt(),
        "TaskList": obj({"tasks": {"type": "array", "items": ref("Task")},
                         "next_cursor": nullable(string()),
                         "applied_seq": APPLIED_SEQ, "shard": SHARD,
                         "applied_seqs": APPLIED_SEQS},
                        ("tasks",)),
        "ClaimRequest": _claim(),
        "HeartbeatRequest": _heartbeat_item(batch=False),
        "HeartbeatAnswer": obj({"task_id": string(), "lease_expires_at": TIME,
                                "cancel_requested": {"type": "boolean"},
                                "applied_seq": APPLIED_SEQ, "shard": SHARD},
                               ("lease_expires_at", "cancel_requested")),
        "CompleteRequest": obj({"fencing_token": FENCING_TOKEN, "result": RESULT},
                               ("fencing_token",), closed=True),
        "FailRequest": obj({"fencing_token": FENCING_TOKEN, "error": ERROR,
                            **R.FAIL_FIELDS},
                           ("fencing_token",), closed=True),
        "SchedulePut": _schedule_put(),
        "Schedule": _schedule(),
        "Tenant": _tenant(),
        "Cluster": _cluster(),
        "NodeStatus": _node_status(own=True),
        "Stats": _stats(),
        "TimeSeries": _timeseries(),
        "Readiness": obj({"status": {"const": "ready"}, "node": string(),
                          "leader": string(), "applied_seq": APPLIED_SEQ, "shard": SHARD},
                         ("status", "node", "leader")),
    }


# --- operations ------------------------------------------------------------------------------

def _json(schema: Schema) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _errors(*statuses: int) -> dict[str, Any]:
    out = {}
    for status in sorted({400, 401, 403, *statuses}):
        codes = sorted(c for c, s in STATUS_BY_CODE.items() if s == status)
        out[str(status)] = {"description": ", ".join(codes) or "error",
                            "content": _json(ref("Error"))}
        if status == 429:
            out["429"]["headers"] = {"Retry-After": RETRY_AFTER}
    return out


def op(summary: str, ok: Schema | None, *, status: int = 200, body: Schema | None = None,
       params: list | None = None, errors: tuple[int, ...] = (), tag: str = "tasks",
       content_type: str = "application/json", body_required: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"summary": summary, "tags": [tag],
                           "operationId": summary.lower().replace(" ", "_").replace("'", "")}
    if params:
        out["parameters"] = params
    if body is not None:
        out["requestBody"] = {"required": body_required, "content": _json(body)}
    answer: dict[str, Any] = {"description": "success"}
    if ok is not None:
        answer["content"] = {content_type: {"schema": ok}}
    out["responses"] = {str(status): answer, **_errors(*errors)}
    return out


def path_param(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"},
            "description": description}


def query(name: str, schema: Schema, description: str = "") -> dict[str, Any]:
    out = {"name": name, "in": "query", "required": False, "schema": schema}
    if description:
        out["description"] = description
    return out


RETRY_AFTER = {"description": "with `overloaded`: whole seconds to wait before retrying "
               "(DESIGN 14.2)", "schema": integer(1)}
READ_PARAMS = [
    query("min_seq", integer(0), "wait until this node has applied this sequence number "
          "(with several shards also `shard:seq` pairs, comma-separated: each read takes "
          "its own shard's)"),
    query("consistency", {"type": "string", "enum": ["local", "linearizable"],
                          "default": "local"}),
]
TASK_ID = path_param("task_id", "the task's id")
PREFER = {"name": "Prefer", "in": "header", "required": False, "schema": string(1024),
          "description": "`return=minimal` (RFC 7240): each task created, completed or "
          "failed is answered by `MinimalTask`, each claimed task by `ClaimedTask`, and the "
          "answer says `Preference-Applied: return=minimal`"}
SCHEDULE_ID = path_param("schedule_id", "the schedule's id (unique per tenant)")
SCHEDULE_TENANT = query("tenant", TENANT, "the schedule's tenant (default: default)")
TENANT_NAME = path_param("tenant", "the tenant's name")
WRITE_ERRORS = (404, 409, 413, 429, 503, 504)


def _submit_op(submitted: Schema, submit: Schema) -> dict[str, Any]:
    """A submit's 429 `overloaded` says why in `details.reason` (DESIGN 14.2)."""
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


def _with_leader_header(operation: dict[str, Any]) -> dict[str, Any]:
    """A claim's answer names the leader's URL: a client's next claim may go there."""
    operation["responses"]["200"]["headers"] = {"X-Tsched-Leader": {
        "description": "the URL of the node that leads (where this claim was served, or "
                       "forwarded to); absent when not known", "schema": string()}}
    return operation


def _task_paths() -> dict[str, Any]:
    task, action_body = ref("Task"), obj({}, closed=True)
    action: dict[str, Any] = dict(body=action_body, body_required=False, params=[TASK_ID],
                                  errors=WRITE_ERRORS)
    submit = {"oneOf": [ref("TaskSubmit"), obj({"tasks": {
        "type": "array", "items": ref("TaskSubmit"), "minItems": 1, "maxItems": v.BATCH_MAX}},
        ("tasks",), closed=True)]}
    brief = ref("MinimalTask")
    submitted = {"oneOf": [task, brief, obj({"tasks": {"type": "array", "items": {
                                                "oneOf": [task, brief, ref("Error")]}},
                                      "applied_seq": APPLIED_SEQ, "shard": SHARD,
                                      "applied_seqs": APPLIED_SEQS},
                               ("tasks",))]}
    return {
        "/v1/tasks": {
            "post": _submit_op(submitted, submit),
            "get": op("List tasks", ref("TaskList"), params=[
                query("state", {"type": "string", "enum": LISTED_STATES},
                      "`retrying`: the pending tasks whose last attempt failed or expired"),
                query("tenant", TENANT), query("task_type", NAME), query("schedule_id", NAME),
                query("limit", {**integer(1, v.LIST_LIMIT_MAX), "default": 100}),
                query("cursor", string(512), "next_cursor of the previous page"),
                *READ_PARAMS], errors=(503, 504)),
        },
        "/v1/tasks/{task_id}": {
            "get": op("Get a task", task, params=[TASK_ID, *READ_PARAMS], errors=(404, 503, 504)),
        },
        "/v1/tasks/{task_id}/cancel": {"post": op("Cancel a task", task, **action)},
        "/v1/tasks/{task_id}/replay": {
            "post": op("Replay a dead-lettered task", task, **action, tag="dead letters")},
        "/v1/tasks/{task_id}/discard": {
            "post": op("Discard a dead-lettered task", task, **action, tag="dead letters")},
        **_worker_task_paths(task, brief),
    }


def _worker_task_paths(task: Schema, brief: Schema) -> dict[str, Any]:
    """The paths a worker uses: heartbeats, completions and failures, releases, claims."""
    results = {"type": "array", "items": {"oneOf": [task, brief, ref("HeartbeatAnswer"),
                                                    ref("Error")]}}
    reported = {"oneOf": [task, brief]}
    answers = obj({"results": results, "applied_seq": APPLIED_SEQ, "shard": SHARD,
                   "applied_seqs": APPLIED_SEQS}, ("results",))
    return {
        "/v1/tasks/{task_id}/heartbeat": {"post": op(
            "Heartbeat", ref("HeartbeatAnswer"), body=ref("HeartbeatRequest"), params=[TASK_ID],
            errors=WRITE_ERRORS, tag="workers")},
        "/v1/tasks/{task_id}/complete": {"post": op(
            "Complete a task", reported, body=ref("CompleteRequest"), params=[TASK_ID, PREFER],
            errors=WRITE_ERRORS, tag="workers")},
        "/v1/tasks/{task_id}/fail": {"post": op(
            "Fail a task", reported, body=ref("FailRequest"), params=[TASK_ID, PREFER],
            errors=WRITE_ERRORS, tag="workers")},
        "/v1/tasks/{task_id}/release": {"post": op(
            "Release a task", task, body=obj({"fencing_token": FENCING_TOKEN}, ("fencing_token",),
                                             closed=True,
                                             description="give a claimed task back unrun, "
                                                         "without using up a retry"),
            params=[TASK_ID], errors=WRITE_ERRORS, tag="workers")},
        "/v1/claims": {"post": _with_leader_header(op(
            "Claim tasks", obj({"tasks": {"type": "array", "items": {
                                    "oneOf": [task, ref("ClaimedTask")]}},
                                "completions": results,
                                "applied_seq": APPLIED_SEQ, "shard": SHARD,
                                "applied_seqs": APPLIED_SEQS},
                               ("tasks",)),
            body=ref("ClaimRequest"), params=[PREFER], errors=WRITE_ERRORS, tag="workers"))},
        "/v1/completions": {"post": op(
            "Complete or fail tasks", answers,
            body=obj({"completions": {"type": "array", "items": _completion_item(),
                                      "minItems": 1, "maxItems": v.BATCH_MAX}},
                     ("completions",), closed=True),
            params=[PREFER], errors=(413, 503, 504), tag="workers")},
        "/v1/heartbeats": {"post": op(
            "Heartbeat tasks", answers,
            body=obj({"heartbeats": {"type": "array", "items": _heartbeat_item(batch=True),
                                     "minItems": 1, "maxItems": v.BATCH_MAX}},
                     ("heartbeats",), closed=True),
            errors=(413, 503, 504), tag="workers")},
    }


def _schedule_paths() -> dict[str, Any]:
    sched = ref("Schedule")
    one = [SCHEDULE_ID, SCHEDULE_TENANT]
    action: dict[str, Any] = dict(params=one, errors=WRITE_ERRORS, tag="schedules")
    return {
        "/v1/schedules": {"get": op(
            "List schedules", obj({"schedules": {"type": "array", "items": sched},
                                   "next_cursor": nullable(string()),
                                   "applied_seq": APPLIED_SEQ, "shard": SHARD,
                                   "applied_seqs": APPLIED_SEQS}, ("schedules",)),
            params=[query("tenant", TENANT),
                    query("limit", {**integer(1, v.LIST_LIMIT_MAX), "default": 100}),
                    query("cursor", string(512)), *READ_PARAMS],
            errors=(503, 504), tag="schedules")},
        "/v1/schedules/{schedule_id}": {
            "put": op("Put a schedule", sched, body=ref("SchedulePut"), **action),
            "get": op("Get a schedule", sched, params=[*one, *READ_PARAMS],
                      errors=(404, 503, 504), tag="schedules"),
            "delete": op("Delete a schedule", sched, **action),
        },
        "/v1/schedules/{schedule_id}/pause": {"post": op("Pause a schedule", sched, **action)},
        "/v1/schedules/{schedule_id}/resume": {"post": op("Resume a schedule", sched, **action)},
        "/v1/schedules/{schedule_id}/trigger": {"post": op(
            "Trigger a schedule now", sched, **action)},
        "/v1/cron/preview": {"get": op(
            "Preview cron fires", obj({
                "cron": string(), "timezone": string(), "applied_seq": APPLIED_SEQ, "shard": SHARD,
                "fires": {"type": "array", "items": string(
                    description="RFC 3339 in the given zone, with its offset")}}, ("fires",)),
            params=[{**query("cron", string(cron.EXPR_CHARS_MAX, 1)), "required": True},
                    query("timezone", {**string(cron.ZONE_CHARS_MAX, 1), "default": "UTC"}),
                    query("from", TIME_IN, "default: now"),
                    query("count", {**integer(1, schedules_api.PREVIEW_COUNT_MAX),
                                    "default": 10}),
                    query("schedule_id", NAME, "seeds the H fields as that schedule's")],
            tag="schedules")},
    }


def _admin_paths() -> dict[str, Any]:
    tenant_put = obj({"max_running": integer(0, v.TENANT_RUNNING_MAX, "0: unlimited"),
                      "weight": integer(1, v.TENANT_WEIGHT_MAX)}, closed=True)
    text = {"type": "string"}
    return {
        "/v1/tenants": {"get": op(
            "List tenants", obj({"tenants": {"type": "array", "items": ref("Tenant")},
                                 "applied_seq": APPLIED_SEQ, "shard": SHARD,
                                 "applied_seqs": APPLIED_SEQS}, ("tenants",)),
            params=READ_PARAMS, errors=(503, 504), tag="tenants")},
        "/v1/tenants/{tenant}": {
            "put": op("Set a tenant", ref("Tenant"), body=tenant_put, params=[TENANT_NAME],
                      errors=WRITE_ERRORS, tag="tenants"),
            "get": op("Get a tenant", ref("Tenant"), params=[TENANT_NAME, *READ_PARAMS],
                      errors=(404, 503, 504), tag="tenants"),
        },
        "/v1/cluster": {"get": op("Cluster status", ref("Cluster"), tag="cluster")},
        "/v1/cluster/self": {"get": op("This node's status", ref("NodeStatus"), tag="cluster")},
        "/v1/cluster/transfer-leadership": {"post": op(
            "Transfer leadership", None, status=202,
            body=obj({"to": string(64, description="a node id; default: any")}, closed=True),
            body_required=False, errors=(404, 409, 503), tag="cluster")},
        "/v1/cluster/backup": {"get": op("Backup", {"type": "string", "format": "binary"},
            params=[query("shard", integer(0, 63))], errors=(400, 409, 503, 504), tag="cluster",
            content_type="application/octet-stream")},
        "/v1/stats": {"get": op(
            "Queue statistics", ref("Stats"), params=[query("tenant", TENANT)], tag="cluster")},
        "/v1/timeseries": {"get": {**op(
            "Activity time series", ref("TimeSeries"), tag="cluster",
            params=[query("step_s", {"type": "integer", "enum": [1, 60], "default": 60},
                          "1: per second; 60: per minute")]),
            "description": "The last hour of activity, drawn by the dashboard, from a ring of "
                           "3,600 one-second points the node keeps in memory (DESIGN 14.5). "
                           "With shards: summed over every shard. Needs an admin token when "
                           "the cluster has [auth]."}},
        "/v1/openapi.json": {"get": op("This document", {"type": "object"}, tag="operations")},
        "/healthz": {"get": op("Liveness", obj({"status": {"const": "ok"}, "node": text},
                                                ("status", "node")), tag="operations")},
        "/readyz": {"get": {**op("Readiness", ref("Readiness"), tag="operations", errors=(503,)),
                            "description": "200 when the node sees a leader with a quorum and "
                                           "has applied what it knows to be committed; else "
                                           "503 no_leader or unavailable (the message says "
                                           "why)."}},
        "/metrics": {"get": op("Prometheus metrics", text, tag="operations",
                               content_type="text/plain")},
        "/": {"get": op("Dashboard", text, tag="operations", content_type="text/html")},
        "/static/{name}": {"get": op(
            "Dashboard asset", text, params=[path_param(
                "name", "app.js, app.css, charts.js, uPlot.iife.min.js, uPlot.min.css or "
                        "uPlot.LICENSE.txt")],
            errors=(404,), tag="operations", content_type="text/plain")},
    }


@functools.cache
def document() -> dict[str, Any]:
    """The whole document (built once; callers must not mutate it)."""
    return openapi_members.add_to(openapi_audit.add_to({
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "tsched",
            "version": API_VERSION,
            "description": "A Raft-replicated distributed task scheduler. Every answer of a "
                           "read or write carries applied_seq; pass ?min_seq=N to read your "
                           "writes from any node.",
        },
        "paths": {**_task_paths(), **_schedule_paths(), **_admin_paths(), **archive_paths()},
        "components": {
            "schemas": components(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "admin or tenant-scoped token "
                                                          "(when [auth] is configured)"}},
        },
        "security": [{}, {"bearer": []}],
    }))


@functools.cache
def document_bytes() -> bytes:
    return orjson.dumps(document())
