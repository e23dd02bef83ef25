"""Consistent reads: a read's `min_seq` waited for, `consistency=linearizable` answered by
the leader after a Barrier, or relayed to it from a follower."""
from __future__ import annotations

from aiohttp import web

from tsched.statemachine import commands as c

from tsched.node.api import validate
from tsched.node.forwarding import FORWARDED_HEADER
from tsched.node.raft.commit import propose_one
from tsched.node.services import Node
from tsched.node.errors import ApiError
from tsched.node.ids import new_id

MIN_SEQ_WAIT_S = 5.0          # a read waiting for its min_seq gives up after this (504)
SEQ_MAX = 2**63 - 1


async def before_read(request: web.Request, node: Node, extra: tuple[str, ...] = ()
                      ) -> web.Response | None:
    """Apply `min_seq` and `consistency`; a response when the read was sent to the leader."""
    q = request.query
    validate.query(q, ("min_seq", "consistency") + extra)
    mode = validate.consistency(q)
    min_seq = validate.query_int(q, "min_seq", 0, SEQ_MAX, 0)
    unhealthy = getattr(node.replica, "unhealthy_reason", lambda: None)()
    if unhealthy is not None:     # a stuck Raft thread: the state may be far behind
        raise ApiError("unavailable", unhealthy, {"node": node.node_id})
    if mode == "linearizable":
        if not node.replica.is_ready_leader():
            return await relay_to_leader(request, node)
        _, seq = await propose_one(node, c.Barrier(request_id=new_id(),
                                                   now_ms=node.clock.now_ms()))
        min_seq = max(min_seq, seq)
    if min_seq:
        await node.seqs.wait(min_seq, node.replica, MIN_SEQ_WAIT_S)
    return None


async def relay_to_leader(request: web.Request, node: Node) -> web.Response:
    if request.headers.get(FORWARDED_HEADER):
        raise ApiError("no_leader", "this node is no longer the leader", {"node": node.node_id})
    url = node.leader_url()
    if url is None or node.replica.leader_id() == node.node_id:
        raise ApiError("no_leader", "no leader is known at the moment")
    body = await request.read()
    auth = request.headers.get("Authorization")
    assert node.forwarder is not None, "the app's startup context makes the forwarder"
    status, data = await node.forwarder.send(url, request.method, request.path_qs,
                                             body or None, timeout_s=MIN_SEQ_WAIT_S + 5,
                                             headers={"Authorization": auth} if auth else None)
    return web.Response(body=data, status=status, content_type="application/json")
