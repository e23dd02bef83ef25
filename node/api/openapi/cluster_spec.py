"""The cluster's part of the OpenAPI document: every node's status, this node's, and the
leadership transfer (api/cluster.py)."""
from __future__ import annotations

from tsched.node.api.openapi.schema import (
    APPLIED_SEQ, SHARD, Fragment, Schema, integer, nullable, obj, op, ref, string)


def _node_status(own: bool) -> Schema:
    props = {"id": string(), "http": string(), "raft": string(),
             "role": nullable(string(description="leader, follower or candidate")),
             "term": nullable(integer(0)),
             "commit_index": nullable(integer(0)), "applied_seq": nullable(integer(0)),
             "digest": nullable(string()), "reachable": {"type": "boolean"}}
    if own:
        props.update(leader=nullable(string()), applied_seq=APPLIED_SEQ, shard=SHARD,
                     ready={"type": "boolean", "description": "a leader whose barrier applied"},
                     waiting_claims=integer(0, description="long polls waiting here"))
    return obj(props, ("id", "role", "reachable"))


def _tier() -> Schema:
    return obj({"name": string(), "priority_min": integer(0, 10), "priority_max": integer(0, 10),
                "sla_s": nullable({"type": "number", "description": "null: best effort"})},
               ("name", "priority_min", "priority_max", "sla_s"))


def _cluster() -> Schema:
    nodes = {"type": "array", "items": _node_status(own=False)}
    shard = obj({"shard": integer(0), "leader": nullable(string()),
                 "term": nullable(integer(0)), "nodes": nodes}, ("shard", "leader", "nodes"))
    return obj({"leader": nullable(string()), "term": nullable(integer(0)), "nodes": nodes,
                "shards": {"type": "array", "items": shard,
                           "description": "every shard, in a cluster with several; the "
                                          "top-level leader, term and nodes are shard 0's"},
                "tiers": {"type": "array", "items": _tier(),
                          "description": "the priority tiers (DESIGN 5.1), in order"},
                "applied_seq": APPLIED_SEQ, "shard": SHARD}, ("leader", "term", "nodes", "tiers"))


def fragment() -> Fragment:
    return Fragment({
        "/v1/cluster": {"get": op("Cluster status", ref("Cluster"), tag="cluster")},
        "/v1/cluster/self": {"get": op("This node's status", ref("NodeStatus"), tag="cluster")},
        "/v1/cluster/transfer-leadership": {"post": op(
            "Transfer leadership", None, status=202,
            body=obj({"to": string(64, description="a node id; default: any")}, closed=True),
            body_required=False, errors=(404, 409, 503), tag="cluster")},
    }, {"Cluster": _cluster(), "NodeStatus": _node_status(own=True)})
