"""Membership changes' part of the OpenAPI document (DESIGN 6.2, api/members.py): `GET/POST
/v1/cluster/members`, `DELETE /v1/cluster/members/{id}`, the `Member` and `Members`
schemas."""
from __future__ import annotations

from tsched.node.api.members import ADDRESS_CHARS_MAX
from tsched.node.api.openapi.schema import (
    Fragment, PathItem, Schema, integer, nullable, obj, op, path_param, query, ref, string)
from tsched.node.config import NODE_ID_LEN_MAX

_ADDRESS = string(ADDRESS_CHARS_MAX, 1, "host:port")
_ID = string(NODE_ID_LEN_MAX, 1, pattern="^[A-Za-z0-9_-]+$")
_COMMITTED = "the members once the change is committed"
_CONFLICTS = (
    "409 conflict: details.reason is change_in_progress (one change at a time), "
    "member_exists, too_many_members, sharded (a shard replica asked directly), "
    "partial_placement (a sharded cluster whose nodes do not each hold every "
    "shard), too_few_members (a cluster keeps at least 3 members; a smaller one "
    "takes no change) or leader_transfer_failed. With shards, the change is made "
    "in every shard group; a refusal after some made it names them in "
    "details.shards_changed (send the request again to finish).")


def _schemas() -> dict[str, Schema]:
    member = obj({"id": _ID, "raft": _ADDRESS, "http": _ADDRESS}, ("id", "raft", "http"),
                 closed=True)
    members = obj({
        "members": {"type": "array", "items": ref("Member")},
        "leader": nullable(string()),
        "changing": {"type": "boolean", "description": "the last change is in this node's "
                     "log, not applied yet"},
        "config_index": {**nullable(integer(0)), "description": "a committed Raft log index "
                         "at which these are the members (null while a change is not "
                         "applied): of two answers, the greater is the later membership"},
        "applied_seq": integer()}, ("members", "leader", "changing"))
    return {"Member": member, "Members": members}


def _paths() -> dict[str, PathItem]:
    return {
        "/v1/cluster/members": {
            "get": op("Members", ref("Members"), tag="cluster", ok_description=_COMMITTED,
                      params=[query("shard", integer(0), "with shards: that shard group's "
                                    "members, at the shard's Raft ports")],
                      description="The cluster's members as this node's log has them (with "
                                  "shards: shard 0's, at the nodes' own addresses). Admin "
                                  "only, or a node's X-Tsched-Peer credential (signed with "
                                  "the cluster secret: a node that sees no leader asks "
                                  "whether it is still a member, DESIGN 6.2)."),
            "post": op("Add a member", ref("Members"), tag="cluster", operation_id="add_member",
                       ok_description=_COMMITTED, body=ref("Member"), errors=(409, 503, 504),
                       description="Admin only. The leader commits the new member (a "
                                   "follower relays the request); start the node with "
                                   "`tsnode --join`. " + _CONFLICTS)},
        "/v1/cluster/members/{id}": {"delete": op(
            "Remove a member", ref("Members"), tag="cluster", operation_id="remove_member",
            ok_description=_COMMITTED, params=[path_param("id", "a member's id")],
            errors=(404, 409, 503, 504), base_errors=(401, 403),
            description="Admin only. The leader is never removed while it leads: it hands "
                        "over leadership first, then its successor removes it. " + _CONFLICTS)},
    }


def fragment() -> Fragment:
    return Fragment(_paths(), _schemas())
