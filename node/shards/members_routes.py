"""A sharded cluster's members through a node's router (DESIGN.md section 6.2).

Where every node holds every shard, a node is a member of every shard group: the router
lists shard 0's members as the cluster's nodes, and makes a change in every shard group
at once (each group's leader proposes it, one change at a time as in a single group). A
change is safe to send again: adding a member exactly as it is answers 200, and a removal
counts a shard the member already left as done. So a change that failed in some shard
(its answer names the shards changed) is finished by sending it again.

Theory of the addresses: shard s of a node listens for Raft on the node's base Raft port
+ 100 s (config.SHARD_PORT_STEP) and answers its router 50 above that; a shard group's
member records its node's public API. Shard 0's Raft port is the base port, so shard 0's
member list is the node list as it is.
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence

import orjson
from aiohttp import web

from tsched.node.api import validate
from tsched.node.api.jsonio import json_body, status_of
from tsched.node.api.members import FAN_OUT_HEADER, RELAY_S, parse_member
from tsched.node.config import split_address
from tsched.node.errors import ApiError
from tsched.node.raft.membership import Member
from tsched.node.shards.join_all_groups import as_nodes
from tsched.node.topology import shifted
from tsched.node.shards.router import ROUTER, Relayed, Router, as_response, json_response
from tsched.node.config import PORT_MAX, REPLICAS_MAX, internal_http, is_full_placement
from tsched.node.shards.upstream import Answer

routes = web.RouteTableDef()

PATH = "/v1/cluster/members"
# One shard's change: a handover (its leader's own removal), the audit note, the change.
FAN_OUT_TIMEOUT_S = RELAY_S + 20.0


def _router(request: web.Request) -> Router:
    return request.app[ROUTER]


@routes.get(PATH)
async def members(request: web.Request) -> web.Response:
    """The nodes (`?shard=s`: that shard group's own list, at its shard's Raft ports)."""
    r = _router(request)
    validate.query(request.query, ("shard",))
    if "shard" in request.query:
        shard = validate.query_int(request.query, "shard", 0, r.count - 1, 0)
        return await r.relay(request, shard, path_qs=PATH)
    answer, doc = await _shard0(r, request)
    return _listing(r, doc, answer.headers)


@routes.post(PATH)
async def add_member(request: web.Request) -> web.Response:
    r = _router(request)
    validate.query(request.query, ())
    _, doc = await _shard0(r, request)          # the token is checked first
    member = parse_member(await json_body(request))
    _changeable(r)
    _room_for_shard_ports(member.raft, r.count)
    ids = [m.get("id") for m in doc["members"]]
    if member.id not in ids and len(ids) >= REPLICAS_MAX:
        raise ApiError("conflict", f"the cluster has {len(ids)} nodes, the most a sharded "
                       f"cluster has: every node holds every shard, and a shard has at most "
                       f"{REPLICAS_MAX} replicas", {"reason": "too_many_members",
                                                    "max": REPLICAS_MAX})
    bodies = [orjson.dumps({"id": member.id, "raft": shifted(member.raft, s),
                            "http": member.http}) for s in range(r.count)]
    answers = await _fan_out(r, request, "POST", PATH, bodies)
    return _outcome(r, answers, done=(200,))


@routes.delete(PATH + "/{id}")
async def remove_member(request: web.Request) -> web.Response:
    r = _router(request)
    validate.query(request.query, ())
    await _shard0(r, request)
    _changeable(r)
    answers = await _fan_out(r, request, "DELETE", request.path, [None] * r.count)
    if all(a.status == 404 for a in answers):
        return as_response(answers[0])          # a member of no shard
    return _outcome(r, answers, done=(200, 404))


async def _shard0(r: Router, request: web.Request) -> tuple[Answer, dict]:
    """Shard 0's members, as its replica here answers them (it checks the token)."""
    answer = await r.send(request, 0, "GET", PATH, None)
    doc = answer.json()
    if answer.status != 200 or not isinstance(doc, dict) or not isinstance(
            doc.get("members"), list):
        raise Relayed(answer)
    return answer, doc


def _listing(r: Router, doc: dict, headers: dict | None = None) -> web.Response:
    return json_response({"members": node_list(r, doc), "leader": doc.get("leader"),
                          "changing": bool(doc.get("changing")),
                          "config_index": doc.get("config_index")}, headers=headers)


def node_list(r: Router, doc: dict) -> list[dict]:
    """The nodes at their own addresses. With every shard on every node: shard 0's members
    (the file's API address for a node it lists at that Raft address: members recorded
    before shard groups kept the public API name a replica's internal one). Otherwise the
    nodes of the file."""
    if not is_full_placement(r.cfg):
        return [{"id": n.id, "raft": n.raft, "http": n.http} for n in r.cfg.nodes]
    shard0 = [Member(str(m.get("id")), str(m.get("raft")), str(m.get("http")))
              for m in doc["members"]]
    return [m.to_json() for m in as_nodes(r.cfg, shard0)]


def _changeable(r: Router) -> None:
    if not is_full_placement(r.cfg):
        raise ApiError("conflict", "membership changes need every node to hold every shard "
                       f"([cluster] replicas unset); this cluster places {r.cfg.replicas} "
                       f"replicas of each shard on {len(r.cfg.nodes)} nodes: change its "
                       "nodes by a backup and a restore (docs/operations.md 8.1)",
                       {"reason": "partial_placement"})


def _room_for_shard_ports(raft: str, shards: int) -> None:
    # the highest port a node uses: its last shard's internal HTTP
    top = int(internal_http(shifted(raft, shards - 1)).rpartition(":")[2])
    if top > PORT_MAX:
        raise validate.invalid(f"raft port {split_address(raft, 'raft')[1]} leaves no room "
                               f"for the ports of {shards} shards (up to {top})", field="raft")


async def _fan_out(r: Router, request: web.Request, method: str, path: str,
                   bodies: Sequence[bytes | None]) -> list[Answer]:
    """The change in every shard group at once, each to its leader's replica first."""
    sends = [r.send(request, s, method, path, bodies[s], timeout_s=FAN_OUT_TIMEOUT_S,
                    extra_headers={FAN_OUT_HEADER: "1"}, to_leader=True)
             for s in range(r.count)]
    out = []
    for result in await asyncio.gather(*sends, return_exceptions=True):
        if isinstance(result, ApiError):      # a shard that did not answer
            result = Answer(status_of(result), orjson.dumps(result.body()), "application/json", {})
        elif isinstance(result, BaseException):
            raise result
        out.append(result)
    return out


def _outcome(r: Router, answers: list[Answer], done: tuple[int, ...]) -> web.Response:
    """The node list (from shard 0's answer) once every shard made the change; otherwise
    the first shard's refusal, naming the shards that made it (send it again to finish)."""
    changed = [s for s, a in enumerate(answers) if a.status in done]
    if len(changed) < len(answers):
        s, failed = next((s, a) for s, a in enumerate(answers) if a.status not in done)
        doc = failed.json()
        if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
            details = doc["error"].setdefault("details", {})
            if isinstance(details, dict):
                details.update(shard=s, shards_changed=changed)
            return json_response(doc, status=failed.status, headers=failed.headers)
        return as_response(failed)
    first = answers[0].json()
    if answers[0].status != 200 or not isinstance(first, dict):
        # shard 0 had no such member: list the nodes as another shard has them
        first = next(a.json() for a in answers if a.status == 200)
    return _listing(r, first)
