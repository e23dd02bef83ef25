"""The keyed limits' part of the OpenAPI document (api/keyed_limits.py, issue 46)."""
from __future__ import annotations

from tsched.node.api.keyed_limits import (AFTER_S_MAX, CONCURRENCY_MAX, FIELD_RE, NAME_CHARS_MAX,
                                          PER_S_MAX, RATE_MAX)
from tsched.node.api.openapi.schema import (
    APPLIED_SEQ, READ_PARAMS, SHARD, TIME, WRITE_ERRORS, Fragment, Schema, integer, nullable,
    number, obj, op, path_param, ref, string)

LIMIT_NAME = path_param("name", "the limit's name")
PARTITION_BY = string(64, 1, "`tenant`, or a field of the task's payload (a dotted path "
                      "reaches into objects: `kwargs.account_id`): each value has its own "
                      "budget", pattern=FIELD_RE.pattern)


def _limit() -> Schema:
    part = obj({"partition": string(), "running": integer(0), "in_window": integer(0),
                "held": integer(0)}, ("partition", "running", "in_window", "held"))
    return obj({
        "name": string(NAME_CHARS_MAX), "rate": nullable(integer(1, RATE_MAX)),
        "per_s": nullable(number(0.001, PER_S_MAX)),
        "concurrency": nullable(integer(1, CONCURRENCY_MAX)),
        "partition_by": nullable(PARTITION_BY), "created_at": TIME, "updated_at": TIME,
        "in_use": integer(0, description="running tasks holding a slot (all partitions)"),
        "in_window": integer(0, description="claims in each partition's current window, "
                             "summed"),
        "held": integer(0, description="pending tasks waiting for this limit's budget"),
        "partition_count": integer(0, description="busy partitions"),
        "partitions": {"type": "array", "items": part,
                       "description": "the busiest partitions (admin tokens only)"},
        "applied_seq": APPLIED_SEQ, "shard": SHARD,
    }, ("name", "rate", "per_s", "concurrency", "partition_by"))


def fragment() -> Fragment:
    put = obj({"rate": integer(1, RATE_MAX, "at most this many claims in any window of "
                               "per_s (a sliding window)"),
               "per_s": number(0.001, PER_S_MAX, "the window (default 1)"),
               "concurrency": integer(1, CONCURRENCY_MAX, "at most this many running"),
               "partition_by": PARTITION_BY}, closed=True,
              description="rate and/or concurrency; on a sharded cluster only "
                          "partition_by=tenant (409 otherwise: it could not be exact)")
    report = obj({"fencing_token": integer(0), "limit": string(NAME_CHARS_MAX),
                  "after_s": number(0.001, AFTER_S_MAX, "default 1")},
                 ("fencing_token", "limit"), closed=True)
    return Fragment({
        "/v1/limits": {"get": op(
            "List limits", obj({"limits": {"type": "array", "items": ref("Limit")},
                                "applied_seq": APPLIED_SEQ}, ("limits",)),
            params=READ_PARAMS, errors=(503, 504), tag="limits")},
        "/v1/limits/{name}": {
            "put": op("Put a limit", ref("Limit"), body=put, params=[LIMIT_NAME],
                      errors=WRITE_ERRORS, tag="limits"),
            "get": op("Get a limit", ref("Limit"), params=[LIMIT_NAME, *READ_PARAMS],
                      errors=(404, 503, 504), tag="limits"),
            "delete": op("Delete a limit", ref("Limit"), params=[LIMIT_NAME],
                         errors=WRITE_ERRORS, tag="limits",
                         description="held tasks go back to the queue; tasks naming it "
                                     "run unbound by it"),
        },
        "/v1/tasks/{task_id}/rate-limited": {"post": op(
            "Report rate limited", ref("Task"), body=report,
            params=[path_param("task_id", "the task's id")], errors=WRITE_ERRORS,
            tag="workers", description="the handler's RateLimited: the task's partition of "
            "the limit claims nothing for after_s, for every worker; the task goes back to "
            "pending, its attempt not counted (outcome rate_limited)")},
    }, {"Limit": _limit()})
