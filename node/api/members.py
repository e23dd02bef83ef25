"""Membership changes: `GET/POST /v1/cluster/members`, `DELETE /v1/cluster/members/{id}`
(DESIGN.md section 6.2). The leader proposes the change to Raft (one at a time); a follower
relays the request to it. The node's view of the cluster (`node.config.nodes`: forwarding,
routing, GET /v1/cluster) follows the membership as the replica applies it."""
from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence

import orjson
from aiohttp import web

from tsched.node import config as config_mod
from tsched.node.api import validate
from tsched.node.forwarding import FORWARDED_HEADER
from tsched.node.api.jsonio import json_body, respond
from tsched.node.api.idempotency import request_id
from tsched.node.raft.commit import propose_one
from tsched.node.api.scope import actor_of
from tsched.node.services import Node, node_of
from tsched.node.errors import ApiError, invalid
from tsched.node.raft.handoff import HANDOFF_S, transfer_to
from tsched.node.raft.membership import MEMBERS_MIN, Member, nodes_for
from tsched.node.raft.security import RaftSecurityError, check_raft_security
from tsched.statemachine import commands as c

routes = web.RouteTableDef()

ADDRESS_CHARS_MAX = 255
SEEN_WAIT_S = 2.0      # after the commit, until this node's view shows the change
# A relayed change may wait for a handover (the leader's own removal), the audit note's
# commit, then the change's: room for all of them past the proposal's own timeout.
RELAY_S = HANDOFF_S + 15.0
# A sharded node's router sends a change to every shard group with this header (DESIGN
# 6.2): a change sent to one shard replica without it would change that shard alone.
FAN_OUT_HEADER = "X-Tsched-Members-Fan-Out"


def members_json(node: Node) -> dict:
    """`changing`: the last change is in this node's log but not applied yet (Raft takes
    a membership when its entry enters the log, DESIGN 6.2). `config_index`: a committed
    Raft index at which these are the members (null while changing): a node that sees no
    leader orders its peers' answers by it (member_probe.py)."""
    membership = node.replica.membership
    effect = membership.effect
    return {"members": [m.to_json() for m in effect.members],
            "leader": node.replica.leader_id(), "changing": not membership.settled,
            "config_index": effect.config_index}


@routes.get("/v1/cluster/members")
async def list_members(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    return respond(members_json(node), node.replica.applied_seq)


def parse_member(body: object) -> Member:
    f = validate.Fields(body)
    node_id = validate.text(f.get("id"), "id", config_mod.NODE_ID_LEN_MAX) or ""
    if not node_id.replace("-", "").replace("_", "").isalnum() or not node_id.isascii():
        raise invalid(f"id {node_id!r} must be 1..{config_mod.NODE_ID_LEN_MAX} letters, "
                      "digits, '-' or '_'", field="id")
    addrs = {}
    for key in ("raft", "http"):
        value = validate.text(f.get(key), key, ADDRESS_CHARS_MAX) or ""
        try:
            config_mod.split_address(value, key)
        except ValueError as e:
            raise invalid(str(e), field=key) from None
        addrs[key] = value
    f.done()
    return Member(node_id, addrs["raft"], addrs["http"])


@routes.post("/v1/cluster/members")
async def add_member(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    member = parse_member(await json_body(request))
    _refuse_one_shard_alone(request, node)
    try:
        check_raft_security([member.raft], node.config.secret)
    except RaftSecurityError as e:
        raise invalid(str(e), field="raft") from None
    if node.replica.leader_id() != node.node_id:
        return await _to_leader(request, node)
    members = node.replica.membership.members
    if any(m == member for m in members):      # a repeat
        if not node.replica.membership.settled:
            raise _in_progress()
        return respond(members_json(node), node.replica.applied_seq)
    for key in ("id", "raft", "http"):
        taken = [m.id for m in members if getattr(m, key) == getattr(member, key)]
        if taken:
            raise ApiError("conflict", f"{key} {getattr(member, key)} is already member "
                           f"{taken[0]}'s", {"reason": "member_exists", "field": key})
    if len(members) < MEMBERS_MIN:
        raise ApiError("conflict", f"the cluster has {len(members)} member(s): membership "
                       f"changes need at least {MEMBERS_MIN} (an addition to a smaller one "
                       "cannot commit before the new node runs)",
                       {"reason": "too_few_members", "min": MEMBERS_MIN})
    if len(members) >= config_mod.NODES_MAX:
        raise ApiError("conflict", f"the cluster has {len(members)} members, the most "
                       "supported", {"reason": "too_many_members", "max": config_mod.NODES_MAX})
    return await _change(request, node, "add", member)


@routes.delete("/v1/cluster/members/{id}")
async def remove_member(request: web.Request) -> web.Response:
    node = node_of(request)
    validate.query(request.query, ())
    node_id = request.match_info["id"]
    _refuse_one_shard_alone(request, node)
    if node.replica.leader_id() != node.node_id:
        return await _to_leader(request, node)
    member = node.replica.membership.by_id(node_id)
    members = node.replica.membership.members
    if member is None:
        raise ApiError("not_found", f"no member {node_id!r} in this cluster",
                       {"members": [m.id for m in members]})
    if len(members) - 1 < MEMBERS_MIN:
        raise ApiError("conflict", f"removing {node_id} would leave {len(members) - 1} "
                       f"members; a cluster keeps at least {MEMBERS_MIN}",
                       {"reason": "too_few_members", "min": MEMBERS_MIN})
    if node_id == node.node_id and node.replica.leader_id() == node.node_id:
        # The leader is never removed while it leads: it hands over first, and the new
        # leader removes it.
        if await transfer_to(node.replica, None) is None:
            raise ApiError("conflict", "the leader could not hand over leadership before "
                           "its removal; try again", {"reason": "leader_transfer_failed"})
        return await _relay(request, node)
    return await _change(request, node, "rem", member)


async def _to_leader(request: web.Request, node: Node) -> web.Response:
    """A change asked of a node that does not lead goes to the leader before any check:
    the leader's view of the members decides. A node that has not applied a change yet (it
    was down meanwhile) would answer 404 for a member that joined, and the operator would
    stop a node the cluster counts on for its quorum; or 200 "already a member" for one
    that was removed."""
    if request.headers.get(FORWARDED_HEADER):
        raise ApiError("no_leader", "this node is not the leader")
    return await _relay(request, node)


async def _relay(request: web.Request, node: Node) -> web.Response:
    """Relay to the leader (with the time a change takes). The removal of a leader is the
    one request relayed twice: to the leader, then from it to its successor."""
    url = node.leader_url()
    if url is None:
        raise ApiError("no_leader", "no leader is known at the moment")
    headers = {k: request.headers[k] for k in ("Authorization", FAN_OUT_HEADER)
               if k in request.headers}
    assert node.forwarder is not None, "the app's startup context makes the forwarder"
    body = await request.read()
    status, data = await node.forwarder.send(url, request.method, request.path_qs, body or None,
                                             timeout_s=RELAY_S + node.propose_timeout_s,
                                             headers=headers)
    return web.Response(body=data, status=status, content_type="application/json")


def _refuse_one_shard_alone(request: web.Request, node: Node) -> None:
    """A shard replica takes a change only from its node's router, which sends it to every
    shard group (shards/members_routes.py)."""
    if node.shard is not None and not request.headers.get(FAN_OUT_HEADER):
        raise ApiError("conflict", "this is one shard's replica: a change of a sharded "
                       "cluster's members goes to a node's public API, which makes it in "
                       "every shard", {"reason": "sharded"})


async def _change(request: web.Request, node: Node, kind: str, member: Member) -> web.Response:
    if node.replica.leader_id() != node.node_id:   # leadership moved since the checks
        return await _to_leader(request, node)
    await _audit(request, node, kind, member)
    outcome = await _propose(node, kind, member)
    if outcome == "in_progress" or outcome == "request_denied":
        raise _in_progress()
    if outcome == "not_leader":
        raise ApiError("no_leader", "this node lost leadership; try again")
    if outcome != "success":
        raise ApiError("timeout", f"the membership change's outcome is unknown ({outcome}); "
                       "read GET /v1/cluster/members", {"outcome": "unknown"})
    await _until_seen(node, kind, member)
    return respond(members_json(node), node.replica.applied_seq)


def _in_progress() -> ApiError:
    return ApiError("conflict", "a membership change is in progress; try again once it is "
                    "committed (GET /v1/cluster/members: changing)",
                    {"reason": "change_in_progress"})


async def _propose(node: Node, kind: str, member: Member) -> str:
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def answer(outcome: str) -> None:     # on the Raft thread
        def settle() -> None:
            if not done.done():
                done.set_result(outcome)
        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:
            pass    # the loop is closed: the node is stopping

    node.replica.change_membership(kind, member, answer)
    try:
        return await asyncio.wait_for(done, node.propose_timeout_s)
    except asyncio.TimeoutError:
        return "timeout"


async def _until_seen(node: Node, kind: str, member: Member) -> None:
    deadline = time.monotonic() + SEEN_WAIT_S
    while time.monotonic() < deadline:
        ids = {m.id for m in node.replica.membership.members}
        if (member.id in ids) == (kind == "add"):
            return
        await asyncio.sleep(0.02)


async def _audit(request: web.Request, node: Node, kind: str, member: Member) -> None:
    """The audit entry of the change (DESIGN 14.6), committed before it is proposed."""
    action = "cluster.add_member" if kind == "add" else "cluster.remove_member"
    await propose_one(node, c.AuditNote(
        request_id=request_id(request), now_ms=node.clock.now_ms(), actor=actor_of(request),
        action=action, target=member.id, change_json=orjson.dumps(member.to_json()).decode()))


# --- the node's view of the cluster follows the membership -----------------------------------

def follow_membership(node: Node, loop: asyncio.AbstractEventLoop) -> None:
    """`node.config.nodes` becomes the membership whenever the replica applies a change."""
    def on_change(members: Sequence[Member]) -> None:      # on the Raft thread
        try:
            loop.call_soon_threadsafe(apply_members, node, members)
        except RuntimeError:
            pass

    node.replica.membership.listeners.append(on_change)
    apply_members(node, node.replica.membership.members)


def apply_members(node: Node, members: Sequence[Member]) -> None:
    cfg = node.config
    node.config = dataclasses.replace(cfg, nodes=nodes_for(cfg, node.node_id, members,
                                                           sharded=node.shard is not None))
