"""The workflows' part of the OpenAPI document (api/workflows.py, DESIGN.md section 5.2):
a graph of steps submitted at once, read, listed and cancelled; a step's parents. The
bounds are statemachine/limits.py's (api/workflow_body.py)."""
from __future__ import annotations

from tsched.statemachine.graphs import ON_PARENT_FAILURE, STEP_STATES, WORKFLOW_STATES
from tsched.statemachine.limits import LIMITS

from tsched.node.api import validate as v
from tsched.node.api import workflow_body as wb
from tsched.node.api.openapi.tasks_spec import TRACEPARENT
from tsched.node.api.openapi.schema import (
    ANY_JSON, APPLIED_SEQ, PRIORITY, READ_PARAMS, TASK_TYPE, TENANT, TIME, TIMEOUT_S,
    WRITE_ERRORS, Fragment, Schema, integer, listing_op, nullable, obj, op, path_param, query,
    ref, string)

WORKFLOW_ID = path_param("workflow_id", "the workflow's id")
TASK_ID = path_param("task_id", "the task's id")
STEP_NAME = string(wb.STEP_NAME_CHARS_MAX, 1)


def _step_in() -> Schema:
    return obj({
        "name": STEP_NAME,
        "task_type": TASK_TYPE,
        "payload": {**ANY_JSON, "description": f"JSON, at most {v.PAYLOAD_BYTES_MAX} bytes"},
        "priority": PRIORITY,
        "timeout_s": {**TIMEOUT_S, "default": 300},
        "max_retries": {**integer(0, v.MAX_RETRIES_MAX), "default": 3},
        "retry": ref("RetryPolicy"),
        "deps": {"type": "array", "items": STEP_NAME, "maxItems": wb.DEPS_MAX,
                 "description": "names of the steps this one waits for"},
        "on_parent_failure": {"type": "string", "enum": list(ON_PARENT_FAILURE),
                              "default": "cancel",
                              "description": "cancel: a dead-lettered or cancelled parent "
                                             "cancels this step (and its dependents); run: "
                                             "it runs anyway and sees the failure"},
        "traceparent": {**TRACEPARENT, "description": "this step's own W3C trace context "
                        "(the client's span of the step, linked to its parents'); without "
                        "it the step's task gets the workflow's"},
    }, ("name", "task_type"), closed=True)


def _submit() -> Schema:
    return obj({
        "steps": {"type": "array", "items": ref("WorkflowStepSubmit"), "minItems": 1,
                  "maxItems": wb.STEPS_MAX,
                  "description": f"at most {wb.EDGES_MAX} deps in all; a cycle, an unknown "
                                 "dep or a duplicate name is a 400 naming the step"},
        "tenant": {**TENANT, "default": "default"},
        "idempotency_key": string(v.IDEMPOTENCY_KEY_CHARS_MAX),
        "traceparent": {**TRACEPARENT, "description": "W3C trace context of the submitter, "
                        "kept with every step's task"},
    }, ("steps",), closed=True)


def _step() -> Schema:
    return obj({
        "name": STEP_NAME, "task_id": string(), "task_type": TASK_TYPE,
        "state": {"type": "string", "enum": list(STEP_STATES)},
        "deps": {"type": "array", "items": STEP_NAME},
        "on_parent_failure": {"type": "string", "enum": list(ON_PARENT_FAILURE)},
        "cancelled_by": nullable({"type": "string", "enum": ["parent", "workflow"]}),
        "result": {**ANY_JSON, "description": "at most "
                   f"{LIMITS.step_result_bytes_max} bytes (a larger completion: 413)"},
        "error": nullable(string()),
    }, ("name", "task_id", "state"))


def _workflow() -> Schema:
    return obj({
        "workflow_id": string(), "tenant": string(),
        "state": {"type": "string", "enum": list(WORKFLOW_STATES)},
        "cancel_requested": {"type": "boolean"},
        "idempotency_key": nullable(string()), "created_at": TIME,
        "finished_at": nullable(TIME), "step_count": integer(1),
        "counts": {"type": "object", "additionalProperties": integer(1),
                   "description": "steps by state (states with none left out)"},
        "steps": {"type": "array", "items": ref("WorkflowStep"),
                  "description": "absent from a listing"},
        "duplicate": {"type": "boolean"}, "applied_seq": APPLIED_SEQ,
    }, ("workflow_id", "tenant", "state", "counts"))


def _parents() -> Schema:
    return obj({
        "workflow_id": nullable(string()), "step": nullable(STEP_NAME),
        "parents": {"type": "object", "additionalProperties": obj({
            "state": string(), "task_id": string(), "result": ANY_JSON,
            "error": nullable(string())})},
        "applied_seq": APPLIED_SEQ}, ("parents",))


def fragment() -> Fragment:
    listing = obj({"workflows": {"type": "array", "items": ref("Workflow")},
                   "next_cursor": nullable(string()), "applied_seq": APPLIED_SEQ})
    params = [query("tenant", TENANT), query("state", {"type": "string",
                                                        "enum": list(WORKFLOW_STATES)}),
              query("limit", integer(1, v.LIST_LIMIT_MAX)),
              query("cursor", string(v.CURSOR_CHARS_MAX)), *READ_PARAMS]
    return Fragment({
        "/v1/workflows": {
            "post": op("Submit a workflow", ref("Workflow"), status=201,
                       body=ref("WorkflowSubmit"), errors=WRITE_ERRORS, tag="workflows",
                       description="every step in one log entry, or none; "
                                   f"at most {LIMITS.workflows_open_per_tenant_max} open "
                                   "workflows per tenant (429 tenant_limit)"),
            "get": listing_op("List workflows", listing, params=params, tag="workflows")},
        "/v1/workflows/{workflow_id}": {"get": op(
            "Get a workflow", ref("Workflow"), params=[WORKFLOW_ID, *READ_PARAMS],
            errors=(404, 503, 504), tag="workflows")},
        "/v1/workflows/{workflow_id}/cancel": {"post": op(
            "Cancel a workflow", ref("Workflow"), params=[WORKFLOW_ID], errors=WRITE_ERRORS,
            tag="workflows", body_required=False, body=obj({}, closed=True))},
        "/v1/tasks/{task_id}/parents": {"get": op(
            "Get a step's parents", ref("WorkflowParents"), params=[TASK_ID, *READ_PARAMS],
            errors=(404, 503, 504), tag="workflows")},
    }, {"WorkflowSubmit": _submit(), "WorkflowStepSubmit": _step_in(),
        "WorkflowStep": _step(), "Workflow": _workflow(), "WorkflowParents": _parents()})
