"""The archive's part of the OpenAPI document: `GET /v1/archive` (DESIGN 14.3,
api/archive.py); its bounds come from the code that enforces them."""
from __future__ import annotations

from tsched.node.api import archive as archive_api
from tsched.node.api import validate as v
from tsched.node.api.openapi.schema import (
    Fragment, Schema, integer, nullable, obj, op, query, ref, string)
from tsched.node.ops import archive_search as arch

_INSTANT = string(description="RFC 3339 with an offset, epoch seconds, or YYYY-MM-DD (from: "
                              "the day's start; to: the day's end)")


def _page() -> Schema:
    record = obj({"v": integer(description="the file format's version"),
                  "archived_at": {"type": "string", "format": "date-time"},
                  "task": ref("Task")}, ("v", "archived_at", "task"))
    skipped = obj({"file": string(), "reason": string()})
    return obj({
        "records": {"type": "array", "items": record},
        "next_cursor": {**nullable(string()), "description": "set while files are left to "
                        "read, even after a page with fewer records"},
        "node": string(description="whose archive was read"),
        "skipped": {"type": "array", "items": skipped},
        "applied_seq": integer(0),
        "shard": integer(0, 63),
    }, ("records", "next_cursor", "node", "skipped"))


def _params() -> list[Schema]:
    return [
        query("task_id", string(v.ID_CHARS_MAX, 1), "exactly one of task_id and tenant"),
        query("tenant", string(v.TENANT_CHARS_MAX, 1), "exactly one of task_id and tenant"),
        query("from", _INSTANT, "completed_at at or after"),
        query("to", _INSTANT, "completed_at before; not before from"),
        query("limit", {**integer(1, arch.LIMIT_MAX), "default": arch.LIMIT_DEFAULT},
              "records per page"),
        query("cursor", string(archive_api.CURSOR_CHARS_MAX),
              "the next_cursor of the previous page (from the same node)"),
    ]


def fragment() -> Fragment:
    search = op("Search the audit archive", _page(), params=_params(), errors=(404,),
                tag="operations", description=(
                    "Tasks this node evicted, from its [archive] files (DESIGN 14.3). One "
                    f"request reads at most {arch.ARCHIVE_DAYS_SCANNED_MAX} day files and "
                    f"{arch.ARCHIVE_LINES_SCANNED_MAX} lines; a search by task_id reads "
                    "only the part of a file its index names. Needs an admin token when the "
                    "cluster has [auth]."))
    search["responses"]["403"]["description"] = "forbidden: not an admin token"
    search["responses"]["404"]["description"] = ("archive_not_configured: the node has "
                                                 "[archive] enabled = false")
    return Fragment({"/v1/archive": {"get": search}})
