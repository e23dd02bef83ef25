"""The operations' part of the OpenAPI document: statistics, the time series, health,
readiness, metrics, this document and the dashboard (api/monitoring.py)."""
from __future__ import annotations

from tsched.node.api.openapi.schema import (
    APPLIED_SEQ, APPLIED_SEQS, SHARD, TENANT, Fragment, PathItem, Schema, integer, nullable, obj,
    op, path_param, query, ref, string)


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


def _schemas() -> dict[str, Schema]:
    return {
        "Stats": _stats(),
        "TimeSeries": _timeseries(),
        "Readiness": obj({"status": {"const": "ready"}, "node": string(),
                          "leader": string(), "applied_seq": APPLIED_SEQ, "shard": SHARD},
                         ("status", "node", "leader")),
    }


def _paths() -> dict[str, PathItem]:
    text = {"type": "string"}
    return {
        "/v1/stats": {"get": op(
            "Queue statistics", ref("Stats"), params=[query("tenant", TENANT)], tag="cluster")},
        "/v1/timeseries": {"get": op(
            "Activity time series", ref("TimeSeries"), tag="cluster",
            params=[query("step_s", {"type": "integer", "enum": [1, 60], "default": 60},
                          "1: per second; 60: per minute")],
            description="The last hour of activity, drawn by the dashboard, from a ring of "
                        "3,600 one-second points the node keeps in memory (DESIGN 14.5). "
                        "With shards: summed over every shard. Needs an admin token when "
                        "the cluster has [auth].")},
        "/v1/openapi.json": {"get": op("This document", {"type": "object"}, tag="operations")},
        "/healthz": {"get": op("Liveness", obj({"status": {"const": "ok"}, "node": text},
                                                ("status", "node")), tag="operations")},
        "/livez": {"get": op(
            "Liveness probe", obj({"status": {"const": "alive"}, "node": text},
                                  ("status", "node")), tag="operations",
            description="200 while the process answers HTTP; says nothing of Raft (a node "
                        "cut off from its peers is alive: /readyz takes it out of service). "
                        "Open without a token, as /healthz and /readyz.")},
        "/readyz": {"get": op(
            "Readiness", ref("Readiness"), tag="operations", errors=(503,),
            description="200 when the node sees a leader with a quorum and has applied what "
                        "it knows to be committed; else 503 no_leader or unavailable (the "
                        "message says why); a node that was removed (its peers refuse it as "
                        "not a member, or list the members without it at a later Raft "
                        "index) answers 503 unavailable with details.reason not_a_member.")},
        "/metrics": {"get": op("Prometheus metrics", text, tag="operations",
                               content_type="text/plain")},
        "/": {"get": op("Dashboard", text, tag="operations", content_type="text/html")},
        "/static/{name}": {"get": op(
            "Dashboard asset", text, params=[path_param(
                "name", "app.js, app.css, charts.js, uPlot.iife.min.js, uPlot.min.css or "
                        "uPlot.LICENSE.txt")],
            errors=(404,), tag="operations", content_type="text/plain")},
    }


def fragment() -> Fragment:
    return Fragment(_paths(), _schemas())
