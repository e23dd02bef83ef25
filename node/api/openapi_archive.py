"""The OpenAPI entry of `GET /v1/archive` (DESIGN 14.3), merged into openapi.py's document.

Plain dicts (openapi.py imports this module, so it cannot use openapi.py's helpers); its
bounds come from the code that enforces them."""
from __future__ import annotations

from typing import Any

from tsched.node.api import archive as archive_api
from tsched.node.api import validate as v
from tsched.node.ops import archive_search as arch

_ERROR = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_INSTANT = {"type": "string", "description": "RFC 3339 with an offset, epoch seconds, or "
            "YYYY-MM-DD (from: the day's start; to: the day's end)"}


def _query(name: str, schema: dict, description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


def _record() -> dict[str, Any]:
    return {"type": "object", "required": ["v", "archived_at", "task"], "properties": {
        "v": {"type": "integer", "description": "the file format's version"},
        "archived_at": {"type": "string", "format": "date-time"},
        "task": {"$ref": "#/components/schemas/Task"}}}


def archive_paths() -> dict[str, Any]:
    answer = {"type": "object", "required": ["records", "next_cursor", "node", "skipped"],
              "properties": {
                  "records": {"type": "array", "items": _record()},
                  "next_cursor": {"oneOf": [{"type": "string"}, {"type": "null"}],
                                  "description": "set while files are left to read, even "
                                                 "after a page with fewer records"},
                  "node": {"type": "string", "description": "whose archive was read"},
                  "skipped": {"type": "array", "items": {
                      "type": "object", "properties": {"file": {"type": "string"},
                                                       "reason": {"type": "string"}}}},
                  "applied_seq": {"type": "integer", "minimum": 0},
                  "shard": {"type": "integer", "minimum": 0, "maximum": 63}}}
    params = [
        _query("task_id", {"type": "string", "minLength": 1, "maxLength": v.ID_CHARS_MAX},
               "exactly one of task_id and tenant"),
        _query("tenant", {"type": "string", "minLength": 1, "maxLength": v.TENANT_CHARS_MAX},
               "exactly one of task_id and tenant"),
        _query("from", _INSTANT, "completed_at at or after"),
        _query("to", _INSTANT, "completed_at before; not before from"),
        _query("limit", {"type": "integer", "minimum": 1, "maximum": arch.LIMIT_MAX,
                         "default": arch.LIMIT_DEFAULT}, "records per page"),
        _query("cursor", {"type": "string", "maxLength": archive_api.CURSOR_CHARS_MAX},
               "the next_cursor of the previous page (from the same node)"),
    ]
    return {"/v1/archive": {"get": {
        "summary": "Search the audit archive", "tags": ["operations"],
        "operationId": "search_the_audit_archive", "parameters": params,
        "description": "Tasks this node evicted, from its [archive] files (DESIGN 14.3). "
                       f"One request reads at most {arch.ARCHIVE_DAYS_SCANNED_MAX} day files "
                       f"and {arch.ARCHIVE_LINES_SCANNED_MAX} lines. Needs an admin token "
                       "when the cluster has [auth].",
        "responses": {
            "200": {"description": "success",
                    "content": {"application/json": {"schema": answer}}},
            "400": {"description": "invalid_argument", **_ERROR},
            "401": {"description": "unauthenticated", **_ERROR},
            "403": {"description": "forbidden: not an admin token", **_ERROR},
            "404": {"description": "archive_not_configured: the node has no [archive]",
                    **_ERROR}}}}}
