"""The workers' part of the OpenAPI document: claims, heartbeats, completions, failures and
releases (api/workers.py), their requests' schemas and the claimed task's."""
from __future__ import annotations

from tsched.node.api import validate as v
from tsched.node.api.claim_parsing import PRIORITY_MAX, RETRY_AFTER_S_MAX, TIER_WEIGHT_MAX
from tsched.node.api.openapi.schema import (
    ANY_JSON, APPLIED_SEQ, APPLIED_SEQS, NAME, READ_PARAMS, SHARD, TASK_TYPE, TENANT, TIME,
    WRITE_ERRORS, Fragment, PathItem, Schema, integer, nullable, number, obj, op, path_param,
    ref, string)
from tsched.node.api.sessions import TIMEOUT_MS_DEFAULT, TIMEOUT_S_MAX, TIMEOUT_S_MIN
from tsched.node.api.openapi.tasks_spec import (ERROR_DETAIL, PREFER, PROGRESS_FIELDS,
                                                TASK_ID, task)

CLAIMED_FIELDS = ("task_id", "tenant", "task_type", "state", "payload", "run_at", "attempt",
                  "max_retries", "timeout_s", "execution_id", "schedule_id",
                  "lease_expires_at", "fencing_token", "worker_id", "traceparent")
FENCING_TOKEN = integer(0, v.FENCING_TOKEN_MAX)
RESULT = {**ANY_JSON, "description": f"JSON, at most {v.RESULT_BYTES_MAX} bytes"}
ERROR = {"oneOf": [string(v.ERROR_CHARS_MAX, 0,
                          description=f"at most {v.ERROR_BYTES_MAX} UTF-8 bytes"),
                   ERROR_DETAIL]}
# The priority range and tier weights of a claim (DESIGN.md sections 5, 5.1).
CLAIM_RANGE: dict[str, Schema] = {
    "priority_min": {"type": "integer", "minimum": 0, "maximum": PRIORITY_MAX, "default": 0,
                     "description": "only tasks whose effective priority (aging included) "
                                    "is at least this"},
    "priority_max": {"type": "integer", "minimum": 0, "maximum": PRIORITY_MAX,
                     "default": PRIORITY_MAX,
                     "description": "... and at most this (not below priority_min)"},
    "tier_weights": {"type": "object", "minProperties": 1,
                     "additionalProperties": {"type": "integer", "minimum": 1,
                                              "maximum": TIER_WEIGHT_MAX},
                     "example": {"critical": 50, "high": 30, "normal": 15, "low": 5},
                     "description": "weighted polling by tier: tier name (of the cluster's "
                                    "table, GET /v1/cluster `tiers`) -> weight; the claim "
                                    "takes only those tiers' tasks and splits them by "
                                    "smooth weighted round robin (an empty tier's share "
                                    "goes to the others). Not with priority_min / "
                                    "priority_max"},
}
# A failure's retry instructions (DESIGN.md section 7).
FAIL_FIELDS: dict[str, Schema] = {
    "retryable": {"type": "boolean", "default": True},
    "retry_after_s": {"type": "number", "exclusiveMinimum": 0, "maximum": RETRY_AFTER_S_MAX,
                      "description": "the retry is due after exactly this many seconds "
                                     "instead of the backoff (at most the task's "
                                     "retry.max_s)"},
}


def _claimed_task() -> Schema:
    whole = task()["properties"]
    return obj({**{k: whole[k] for k in CLAIMED_FIELDS}, "shard": SHARD}, CLAIMED_FIELDS,
               closed=True, description="a claimed task as `Prefer: return=minimal` "
               "answers it: what a worker needs to run it")


def _claim() -> Schema:
    return obj({
        "worker_id": NAME,
        "task_types": {"type": "array", "items": TASK_TYPE, "minItems": 1,
                       "maxItems": v.TASK_TYPES_MAX},
        "max_tasks": {**integer(1, v.CLAIM_TASKS_MAX), "default": 1},
        "wait_s": {**number(0, v.WAIT_S_MAX), "default": 0},
        "lease_s": {**number(v.LEASE_S_MIN, v.LEASE_S_MAX), "default": 30}, **CLAIM_RANGE,
        "prefetch_ms": {**integer(0, v.PREFETCH_MS_MAX), "default": 0,
                        "description": "early dispatch: tasks due within this horizon"},
        "completions": {"type": "array", "items": _completion_item(), "maxItems": v.BATCH_MAX,
                        "description": "as in POST /v1/completions: applied at once, "
                                       "before the claim (in its Raft entry when it is "
                                       "dispatched at once); answered in order in the "
                                       "answer's `completions`"},
        "slots": _slots(named=False),
    }, ("worker_id", "task_types"), closed=True)


def _slots(named: bool) -> Schema:
    """A worker's slots (DESIGN 14.4): the autoscaling gauge tsched_worker_slots."""
    props: dict[str, Schema] = {
        "total": integer(1, v.WORKER_SLOTS_MAX),
        "busy": {"type": "object", "additionalProperties": integer(0, v.WORKER_SLOTS_MAX),
                 "description": "task type (one the worker serves) -> slots running it; "
                                "the sum at most total"}}
    if named:
        props = {"worker_id": NAME, "task_types": {"type": "array", "items": TASK_TYPE,
                                                   "minItems": 1,
                                                   "maxItems": v.TASK_TYPES_MAX}, **props}
    return obj(props, ("worker_id", "task_types", "total") if named else ("total",),
               closed=True, description="the worker's slots, kept by the leader for a "
               "minute (tsched_worker_slots)")


def _heartbeat_item(batch: bool) -> Schema:
    props = {"fencing_token": FENCING_TOKEN,
             "lease_s": {**number(v.LEASE_S_MIN, v.LEASE_S_MAX), "default": 30},
             "progress": obj(PROGRESS_FIELDS, ("fraction",), closed=True,
                             description="the handler's progress (optional): kept for the "
                                         "running attempt, shown by GET /v1/tasks/{id}")}
    if batch:
        props = {"task_id": NAME, **props}
    return obj(props, ("task_id", "fencing_token") if batch else ("fencing_token",), closed=True)


def _completion_item() -> Schema:
    done = obj({"task_id": NAME, "fencing_token": FENCING_TOKEN, "result": RESULT},
               ("task_id", "fencing_token"), closed=True)
    failed = obj({"task_id": NAME, "fencing_token": FENCING_TOKEN, "error": ERROR,
                  **FAIL_FIELDS},
                 ("task_id", "fencing_token"), closed=True)
    return {"oneOf": [done, failed]}


def _schemas() -> dict[str, Schema]:
    return {
        "ClaimedTask": _claimed_task(),
        "ClaimRequest": _claim(),
        "HeartbeatRequest": _heartbeat_item(batch=False),
        "HeartbeatAnswer": obj({"task_id": string(), "lease_expires_at": TIME,
                                "cancel_requested": {"type": "boolean"},
                                "applied_seq": APPLIED_SEQ, "shard": SHARD},
                               ("lease_expires_at", "cancel_requested")),
        "CompleteRequest": obj({"fencing_token": FENCING_TOKEN, "result": RESULT},
                               ("fencing_token",), closed=True),
        "FailRequest": obj({"fencing_token": FENCING_TOKEN, "error": ERROR, **FAIL_FIELDS},
                           ("fencing_token",), closed=True),
    }


def _claims_op(results: Schema) -> Schema:
    """A claim's answer names the leader's URL: a client's next claim may go there."""
    out = op("Claim tasks", obj({"tasks": {"type": "array", "items": {
                                     "oneOf": [ref("Task"), ref("ClaimedTask")]}},
                                 "completions": results,
                                 "applied_seq": APPLIED_SEQ, "shard": SHARD,
                                 "applied_seqs": APPLIED_SEQS},
                                ("tasks",)),
             body=ref("ClaimRequest"), params=[PREFER], errors=WRITE_ERRORS, tag="workers")
    out["responses"]["200"]["headers"] = {"X-Tsched-Leader": {
        "description": "the URL of the node that leads (where this claim was served, or "
                       "forwarded to); absent when not known", "schema": string()}}
    return out


WORKER_ID = path_param("worker_id", "the worker's id (as its claims name it)")
SESSION_FIELDS: dict[str, Schema] = {
    "worker_id": string(), "tenant": nullable(TENANT),
    "timeout_s": number(TIMEOUT_S_MIN, TIMEOUT_S_MAX), "opened_at": TIME,
}


def _session_paths() -> dict[str, PathItem]:
    """Worker sessions (DESIGN.md section 9): a silent worker's tasks given back."""
    answer = obj({**SESSION_FIELDS, "created": {"type": "boolean", "description": "opened "
                                                "now (a worker that had one: it expired)"},
                  "given_back": integer(0, description="tasks given back by this end"),
                  "applied_seq": APPLIED_SEQ, "applied_seqs": APPLIED_SEQS},
                 ("worker_id", "timeout_s", "created"))
    keep = obj({"timeout_s": {**number(TIMEOUT_S_MIN, TIMEOUT_S_MAX),
                              "default": TIMEOUT_MS_DEFAULT / 1000}}, (), closed=True)
    listed = obj({**SESSION_FIELDS, "shard": SHARD, "silent_s": nullable({"type": "number", "minimum": 0})},
                 ("worker_id", "timeout_s"))
    return {
        "/v1/sessions/{worker_id}": {
            "put": op("Open or keep alive a worker session", answer, body=keep,
                      params=[WORKER_ID], errors=WRITE_ERRORS, tag="workers",
                      body_required=False, description="At the leader (a follower relays "
                      "it). Once the leader has not heard from the worker (its claims, "
                      "these keepalives) for `timeout_s`, every task leased to it goes back "
                      "to pending at once."),
            "delete": op("End a worker session", answer, params=[WORKER_ID],
                         errors=WRITE_ERRORS, tag="workers")},
        "/v1/sessions": {"get": op(
            "List worker sessions", obj({"sessions": {"type": "array", "items": listed},
                                         "applied_seq": APPLIED_SEQ,
                                         "applied_seqs": APPLIED_SEQS}, ("sessions",)),
            params=READ_PARAMS, errors=(503, 504), tag="workers")},
    }


def _batch(key: str, items: Schema, extra: dict[str, Schema] | None = None) -> Schema:
    return obj({key: {"type": "array", "items": items, "minItems": 1, "maxItems": v.BATCH_MAX},
                **(extra or {})}, (key,), closed=True)


def _paths() -> dict[str, PathItem]:
    task, brief = ref("Task"), ref("MinimalTask")
    results = {"type": "array", "items": {"oneOf": [task, brief, ref("HeartbeatAnswer"),
                                                    ref("Error")]}}
    reported = {"oneOf": [task, brief]}
    answers = obj({"results": results, "applied_seq": APPLIED_SEQ, "shard": SHARD,
                   "applied_seqs": APPLIED_SEQS}, ("results",))
    release = obj({"fencing_token": FENCING_TOKEN}, ("fencing_token",), closed=True,
                  description="give a claimed task back unrun, without using up a retry")
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
            "Release a task", task, body=release, params=[TASK_ID], errors=WRITE_ERRORS,
            tag="workers")},
        "/v1/claims": {"post": _claims_op(results)},
        "/v1/completions": {"post": op(
            "Complete or fail tasks", answers, body=_batch("completions", _completion_item()),
            params=[PREFER], errors=(413, 503, 504), tag="workers")},
        "/v1/heartbeats": {"post": op(
            "Heartbeat tasks", answers, body=_batch("heartbeats", _heartbeat_item(batch=True),
                                                  {"slots": _slots(named=True)}),
            errors=(413, 503, 504), tag="workers")},
        **_session_paths(),
    }


def fragment() -> Fragment:
    return Fragment(_paths(), _schemas())
