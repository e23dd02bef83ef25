"""Cluster endpoints: status of every node, leadership transfer (DESIGN.md section 7).

Health and readiness live with the operations routes (monitoring.py)."""
from __future__ import annotations

import asyncio

import orjson
from aiohttp import web

from tsched.node.api import validate
from tsched.node.config import NodeConfig
from tsched.node.forwarding import FORWARDED_HEADER
from tsched.node.api.jsonio import json_body, respond
from tsched.node.api.idempotency import request_id
from tsched.node.raft.commit import propose_one
from tsched.node.api.reads import relay_to_leader
from tsched.node.api.scope import actor_of
from tsched.node.services import Node, node_of
from tsched.node.raft.handoff import transfer_to
from tsched.node.errors import ApiError
from tsched.statemachine import commands as c
from tsched.statemachine import tiers

routes = web.RouteTableDef()

PEER_STATUS_TIMEOUT_S = 1.0


def self_status(node: Node) -> dict:
    me = node.config.node(node.node_id)
    st = node.replica.status()
    return {"id": node.node_id, "http": me.http, "raft": me.raft, "role": st["role"],
            "term": st["term"], "leader": st["leader"], "commit_index": st["commit_index"],
            "applied_seq": st["applied_seq"], "digest": st["digest"], "reachable": True,
            "ready": st.get("ready", False),
            "waiting_claims": node.claims.waiting if node.claims is not None else 0}


@routes.get("/v1/cluster/self")
async def cluster_self(request: web.Request) -> web.Response:
    node = node_of(request)
    out = self_status(node)
    return respond(out, out["applied_seq"])


async def _peer_status(node: Node, peer: NodeConfig, auth: str | None) -> dict:
    assert node.forwarder is not None, "the app's startup context makes the forwarder"
    # The caller's token goes along: peers check it as they would the caller's own request.
    data = await node.forwarder.get_json(peer.url + "/v1/cluster/self", PEER_STATUS_TIMEOUT_S,
                                         headers={"Authorization": auth} if auth else None)
    if not isinstance(data, dict) or data.get("id") != peer.id:
        return {"id": peer.id, "http": peer.http, "raft": peer.raft, "role": None,
                "commit_index": None, "applied_seq": None, "digest": None, "reachable": False}
    return data


@routes.get("/v1/cluster")
async def cluster(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    mine = self_status(node)
    peers = [n for n in node.config.nodes if n.id != node.node_id]
    auth = request.headers.get("Authorization")
    others = await asyncio.gather(*(_peer_status(node, p, auth) for p in peers))
    by_id = {n["id"]: n for n in [mine, *others]}
    nodes = [_public(by_id[n.id]) for n in node.config.nodes]
    return respond({"leader": mine["leader"], "term": mine["term"], "nodes": nodes,
                    "tiers": tiers.to_json(node.config.tiers)}, mine["applied_seq"])


def _public(status: dict) -> dict:
    keys = ("id", "http", "raft", "role", "term", "commit_index", "applied_seq", "digest",
            "reachable")
    return {k: status.get(k) for k in keys}


def parse_transfer(body: object) -> str | None:
    if body is None:
        return None
    f = validate.Fields(body)
    to = validate.text(f.get("to"), "to", 64, lo=0) or None
    f.done()
    return to


@routes.post("/v1/cluster/transfer-leadership")
async def transfer(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    to = parse_transfer(await json_body(request))
    if to is not None:
        try:
            node.config.node(to)
        except ValueError:
            raise validate.invalid(f"no node {to!r} in this cluster", field="to") from None
    if node.replica.leader_id() != node.node_id:
        if request.headers.get(FORWARDED_HEADER):
            raise ApiError("no_leader", "this node is not the leader")
        return await relay_to_leader(request, node)
    if to != node.node_id:  # asking the leader to hand over to itself: nothing to do
        await _audit_transfer(request, node, to)
        if len(node.config.nodes) > 1:   # a cluster of one has no other node to lead
            await transfer_to(node.replica, to)   # answered once another leads (or 5 s)
    return respond({"accepted": True, "from": node.node_id, "to": to},
                   node.replica.applied_seq, status=202)


async def _audit_transfer(request: web.Request, node: Node, to: str | None) -> None:
    """The audit entry of a transfer (DESIGN 14.6), committed before it is asked for: a
    transfer is no state machine command, so an audit-only one records it."""
    change = orjson.dumps({"from": node.node_id, "to": to}).decode()
    await propose_one(node, c.AuditNote(
        request_id=request_id(request), now_ms=node.clock.now_ms(), actor=actor_of(request),
        action="cluster.transfer_leadership", target=node.node_id, change_json=change))
