"""The audit trail's part of the OpenAPI document (DESIGN 14.6): `GET /v1/audit` and the
`AuditEntry` / `AuditPage` schemas, added to the document openapi.py builds (which is at
its size ceiling). Standalone: the few helpers it needs are spelt out here."""
from __future__ import annotations

from typing import Any

from tsched.statemachine.audit import ACTIONS
from tsched.statemachine.limits import API_LIMITS, LIMITS

from tsched.node.api import validate
from tsched.node.api.jsonio import STATUS_BY_CODE

_ERROR = {"$ref": "#/components/schemas/Error"}
_TIME = {"type": "string", "format": "date-time", "description": "RFC 3339, UTC"}


def _nullable(schema: dict) -> dict:
    return {"oneOf": [schema, {"type": "null"}]}


def _query(name: str, schema: dict, description: str) -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


def schemas() -> dict[str, Any]:
    entry = {"type": "object", "required": ["id", "at", "actor", "action", "tenant", "target",
                                            "request_id", "change"], "properties": {
        "id": {"type": "integer", "minimum": 1,
               "description": "strictly increasing per shard"},
        "at": _TIME,
        "actor": {"type": "string", "maxLength": LIMITS.audit_actor_chars_max,
                  "description": "`admin`, `tenant:<name>` or `anonymous` (no [auth])"},
        "action": {"type": "string", "enum": list(ACTIONS)},
        "tenant": _nullable({"type": "string"}),
        "target": {"type": "string",
                   "description": "task id, `<tenant>/<schedule_id>`, tenant or node id"},
        "request_id": {"type": "string"},
        "change": _nullable({"type": "object", "description": "before/after of the changed "
                             "fields (DESIGN 14.6), at most "
                             f"{LIMITS.audit_change_bytes_max} bytes of JSON"}),
    }}
    page = {"type": "object", "required": ["entries", "next_cursor"], "properties": {
        "entries": {"type": "array", "items": {"$ref": "#/components/schemas/AuditEntry"}},
        "next_cursor": _nullable({"type": "string"}),
        "applied_seq": {"type": "integer"},
        "applied_seqs": {"type": "object", "additionalProperties": {"type": "integer"}},
        "shard": {"type": "integer"}}}
    return {"AuditEntry": entry, "AuditPage": page}


def paths() -> dict[str, Any]:
    params = [
        _query("since", {"type": "string"}, "RFC 3339 or epoch seconds: entries at or after"),
        _query("actor", {"type": "string", "maxLength": LIMITS.audit_actor_chars_max}, ""
               "exact match"),
        _query("action", {"type": "string", "maxLength": API_LIMITS.audit_action_chars_max},
               "exact match, e.g. task.cancel"),
        _query("target", {"type": "string", "maxLength": API_LIMITS.audit_target_chars_max},
               "exact match"),
        _query("limit", {"type": "integer", "minimum": 1, "maximum": validate.LIST_LIMIT_MAX,
                         "default": 100}, "entries per page"),
        _query("cursor", {"type": "string", "maxLength": API_LIMITS.cursor_chars_max},
               "next_cursor of the previous page"),
        _query("min_seq", {"type": "integer", "minimum": 0}, "read your writes"),
        _query("consistency", {"type": "string", "enum": ["local", "linearizable"]}, ""
               "linearizable: answered by the leader"),
    ]
    errors = {}
    for status in (400, 401, 403, 503, 504):
        codes = sorted(c for c, s in STATUS_BY_CODE.items() if s == status)
        errors[str(status)] = {"description": ", ".join(codes) or "error",
                               "content": {"application/json": {"schema": _ERROR}}}
    ok = {"description": "success", "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/AuditPage"}}}}
    return {"/v1/audit": {"get": {
        "summary": "Audit trail", "tags": ["cluster"], "operationId": "audit_trail",
        "description": "Operator actions, newest first (DESIGN 14.6). A tenant token sees "
                       "its tenant's entries only. A page examines at most "
                       f"{API_LIMITS.audit_scan_max} entries, so it may hold fewer than "
                       "`limit` and still have a next_cursor. With shards: merged by time.",
        "parameters": params, "responses": {"200": ok, **errors}}}}


def add_to(doc: dict[str, Any]) -> dict[str, Any]:
    doc["paths"].update(paths())
    doc["components"]["schemas"].update(schemas())
    return doc
