"""The backup's part of the OpenAPI document: `GET /v1/cluster/backup` (api/backup.py)."""
from __future__ import annotations

from tsched.node.api.backup import BACKUP_PATH
from tsched.node.api.openapi.schema import Fragment, integer, op, query


def fragment() -> Fragment:
    return Fragment({BACKUP_PATH: {"get": op(
        "Backup", {"type": "string", "format": "binary"}, params=[query("shard", integer(0, 63))],
        errors=(400, 409, 503, 504), tag="cluster", content_type="application/octet-stream")}})
