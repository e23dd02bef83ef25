"""The paused queues' part of the OpenAPI document (api/queues.py, issue 48)."""
from __future__ import annotations

from tsched.node.api.openapi.schema import (
    APPLIED_SEQ, APPLIED_SEQS, READ_PARAMS, SHARD, TASK_TYPE, TENANT, TIME, WRITE_ERRORS, Fragment, Schema,
    nullable, obj, op, ref, string)
from tsched.node.api.queues import REASON_CHARS_MAX


def pause_schema() -> Schema:
    """A standing pause (also a task's `paused`)."""
    return obj({
        "task_type": nullable({**TASK_TYPE, "description": "null: every task type"}),
        "tenant": nullable({**TENANT, "description": "null: every tenant"}),
        "paused_at": TIME, "actor": nullable(string(description="who paused it (audit)")),
        "reason": nullable(string(REASON_CHARS_MAX)),
        "missing_shards": {"type": "array", "items": SHARD, "description": "a sharded "
                           "cluster's listing: shards that lack this pause (a write cut "
                           "short; repeat it)"},
    }, ("task_type", "tenant", "paused_at", "actor", "reason"))


def _change() -> Schema:
    return obj({
        **pause_schema()["properties"],
        "changed": {"type": "boolean", "description": "false: it was paused already (left "
                    "as it was)"},
        "resumed_at": {**TIME, "description": "a resume: when the pause was lifted"},
        "applied_seq": APPLIED_SEQ, "shard": SHARD, "applied_seqs": APPLIED_SEQS,
    }, ("task_type", "tenant", "paused_at", "changed"))


def fragment() -> Fragment:
    selector = {"task_type": TASK_TYPE, "tenant": TENANT}
    pause = obj({**selector, "reason": string(REASON_CHARS_MAX, 0, "shown with the pause")},
                closed=True, description="a task_type, a tenant, or both")
    resume = obj(selector, closed=True, description="the selector of a standing pause")
    return Fragment({
        "/v1/queues": {"get": op(
            "List paused queues", obj({"pauses": {"type": "array", "items": ref("Pause")},
                                       "applied_seq": APPLIED_SEQ,
                                       "applied_seqs": APPLIED_SEQS}, ("pauses",)),
            params=READ_PARAMS, errors=(503, 504), tag="queues",
            description="the standing pauses; a tenant token sees those that cover its "
                        "tasks")},
        "/v1/queues/pause": {"post": op(
            "Pause a queue", ref("PauseChange"), body=pause, errors=WRITE_ERRORS, tag="queues",
            description="no claim takes the selector's pending tasks until a resume; they "
                        "stay pending and their schedules fire; admin only, audited "
                        "(queue.pause); 429 past the bound on pauses; a sharded cluster "
                        "pauses every shard or answers 503 naming those it could not reach")},
        "/v1/queues/resume": {"post": op(
            "Resume a queue", ref("PauseChange"), body=resume, errors=WRITE_ERRORS,
            tag="queues", description="lift the selector's pause (404 when none stands); "
                                      "admin only, audited (queue.resume)")},
    }, {"Pause": pause_schema(), "PauseChange": _change()})
