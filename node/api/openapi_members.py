"""Membership changes' part of the OpenAPI document (DESIGN 6.2): `GET/POST
/v1/cluster/members`, `DELETE /v1/cluster/members/{id}` and the `Members` schema, added to
the document openapi.py builds (which is at its size ceiling)."""
from __future__ import annotations

from typing import Any

from tsched.node.config import NODE_ID_LEN_MAX
from tsched.node.api.jsonio import STATUS_BY_CODE

_ERROR = {"$ref": "#/components/schemas/Error"}
_ADDRESS = {"type": "string", "minLength": 1, "maxLength": 255, "description": "host:port"}
_ID = {"type": "string", "minLength": 1, "maxLength": NODE_ID_LEN_MAX,
       "pattern": "^[A-Za-z0-9_-]+$"}


def schemas() -> dict[str, Any]:
    member = {"type": "object", "required": ["id", "raft", "http"], "additionalProperties": False,
              "properties": {"id": _ID, "raft": _ADDRESS, "http": _ADDRESS}}
    members = {"type": "object", "required": ["members", "leader", "changing"], "properties": {
        "members": {"type": "array", "items": {"$ref": "#/components/schemas/Member"}},
        "leader": {"oneOf": [{"type": "string"}, {"type": "null"}]},
        "changing": {"type": "boolean", "description": "the last change is in this node's "
                     "log, not applied yet"},
        "applied_seq": {"type": "integer"}}}
    return {"Member": member, "Members": members}


def _errors(*statuses: int) -> dict[str, Any]:
    out = {}
    for status in statuses:
        codes = sorted(c for c, s in STATUS_BY_CODE.items() if s == status)
        out[str(status)] = {"description": ", ".join(codes) or "error",
                            "content": {"application/json": {"schema": _ERROR}}}
    return out


def _ok() -> dict[str, Any]:
    return {"description": "the members once the change is committed", "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Members"}}}}


def paths() -> dict[str, Any]:
    conflicts = ("409 conflict: details.reason is change_in_progress (one change at a time), "
                 "member_exists, too_many_members, sharded (a shard replica asked directly), "
                 "partial_placement (a sharded cluster whose nodes do not each hold every "
                 "shard), too_few_members (a cluster keeps at least 3 members; a smaller one "
                 "takes no change) or leader_transfer_failed. With shards, the change is made "
                 "in every shard group; a refusal after some made it names them in "
                 "details.shards_changed (send the request again to finish).")
    return {
        "/v1/cluster/members": {
            "get": {"summary": "Members", "tags": ["cluster"], "operationId": "members",
                    "description": "The cluster's members as this node's log has them "
                                   "(with shards: shard 0's, at the nodes' own addresses).",
                    "parameters": [{"name": "shard", "in": "query", "required": False,
                                    "schema": {"type": "integer", "minimum": 0},
                                    "description": "with shards: that shard group's members, "
                                                   "at the shard's Raft ports"}],
                    "responses": {"200": _ok(), **_errors(400, 401, 403)}},
            "post": {"summary": "Add a member", "tags": ["cluster"], "operationId": "add_member",
                     "description": "Admin only. The leader commits the new member (a follower "
                                    "relays the request); start the node with `tsnode --join`. "
                                    + conflicts,
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": {"$ref": "#/components/schemas/Member"}}}},
                     "responses": {"200": _ok(), **_errors(400, 401, 403, 409, 503, 504)}}},
        "/v1/cluster/members/{id}": {"delete": {
            "summary": "Remove a member", "tags": ["cluster"], "operationId": "remove_member",
            "description": "Admin only. The leader is never removed while it leads: it hands "
                           "over leadership first, then its successor removes it. " + conflicts,
            "parameters": [{"name": "id", "in": "path", "required": True,
                            "schema": {"type": "string"}, "description": "a member's id"}],
            "responses": {"200": _ok(), **_errors(401, 403, 404, 409, 503, 504)}}},
    }


def add_to(doc: dict[str, Any]) -> dict[str, Any]:
    doc["paths"].update(paths())
    doc["components"]["schemas"].update(schemas())
    return doc
