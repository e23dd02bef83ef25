"""The audit trail's part of the OpenAPI document (DESIGN 14.6, api/audit.py): `GET
/v1/audit` and the `AuditEntry` / `AuditPage` schemas."""
from __future__ import annotations

from tsched.statemachine.audit import ACTIONS
from tsched.statemachine.limits import API_LIMITS, LIMITS

from tsched.node.api import validate as v
from tsched.node.api.openapi.schema import (
    Fragment, Schema, integer, listing_op, nullable, obj, query, ref, string)

_TIME = {"type": "string", "format": "date-time", "description": "RFC 3339, UTC"}


def _schemas() -> dict[str, Schema]:
    entry = obj({
        "id": integer(1, description="strictly increasing per shard"),
        "at": _TIME,
        "actor": string(LIMITS.audit_actor_chars_max, description="`admin`, `tenant:<name>` "
                        "or `anonymous` (no [auth])"),
        "action": {"type": "string", "enum": list(ACTIONS)},
        "tenant": nullable(string()),
        "target": string(description="task id, `<tenant>/<schedule_id>`, tenant or node id"),
        "request_id": string(),
        "change": nullable({"type": "object", "description": "before/after of the changed "
                            "fields (DESIGN 14.6), at most "
                            f"{LIMITS.audit_change_bytes_max} bytes of JSON"}),
    }, ("id", "at", "actor", "action", "tenant", "target", "request_id", "change"))
    page = obj({
        "entries": {"type": "array", "items": ref("AuditEntry")},
        "next_cursor": nullable(string()),
        "item_cursors": {"type": "array", "items": string(),
                         "description": "a replica's page: for each entry, in order, a "
                         "cursor whose page starts at it (a router's merge keeps its place "
                         "with them)"},
        "applied_seq": integer(),
        "applied_seqs": {"type": "object", "additionalProperties": integer()},
        "shard": integer()}, ("entries", "next_cursor"))
    return {"AuditEntry": entry, "AuditPage": page}


def _params() -> list[Schema]:
    return [
        query("since", string(), "RFC 3339 or epoch seconds: entries at or after"),
        query("actor", string(LIMITS.audit_actor_chars_max), "exact match"),
        query("action", string(API_LIMITS.audit_action_chars_max),
              "exact match, e.g. task.cancel"),
        query("target", string(API_LIMITS.audit_target_chars_max), "exact match"),
        query("limit", {**integer(1, v.LIST_LIMIT_MAX), "default": 100}, "entries per page"),
        query("cursor", string(API_LIMITS.cursor_chars_max), "next_cursor of the previous page"),
        query("min_seq", integer(0), "read your writes"),
        query("consistency", {"type": "string", "enum": ["local", "linearizable"]},
              "linearizable: answered by the leader"),
    ]


def fragment() -> Fragment:
    return Fragment({"/v1/audit": {"get": listing_op(
        "Audit trail", ref("AuditPage"), params=_params(), tag="cluster",
        description="Operator actions, newest first (DESIGN 14.6). A tenant token sees its "
                    "tenant's entries only. A page examines at most "
                    f"{API_LIMITS.audit_scan_max} entries, so it may hold fewer than `limit` "
                    "and still have a next_cursor. With shards: merged by time.")}},
        _schemas())
