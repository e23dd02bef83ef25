"""`GET /v1/archive`: this node's audit archive over HTTP (DESIGN 14.3).

The search itself is node/ops/archive_search.py, run in a thread (it reads files). The
cursor is base64url JSON naming the node (and shard) that made it and the file position
to go on from; the router (shards/archive_route.py) reads its shard to send the next page
to the same shard.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import re
from typing import Mapping, TypedDict

import orjson
from aiohttp import web

from tsched.statemachine.archive_format import DAY_MS, day_start_ms

from tsched.node.api import validate
from tsched.node.api.jsonio import respond
from tsched.node.services import Node, node_of
from tsched.node.errors import ApiError
from tsched.node.ops import archive_search as arch
from tsched.node.ops.archiver import archive_dir

routes = web.RouteTableDef()

PARAMS = ("task_id", "tenant", "from", "to", "limit", "cursor")
CURSOR_CHARS_MAX = 512
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_EPOCH = re.compile(r"^\d{1,12}(\.\d{1,6})?$")


def instant(q: Mapping[str, str], key: str) -> int | None:
    """`from`/`to` as epoch ms: RFC 3339 with an offset, epoch seconds, or `YYYY-MM-DD`
    (`from`: the day's start; `to`: its end, so a day names the whole day)."""
    raw = q.get(key)
    if raw is None:
        return None
    if _DAY.match(raw):
        try:
            start = day_start_ms(raw)
        except ValueError:
            raise validate.invalid(f"{key} is not a real day: {raw}", field=key) from None
        return start + DAY_MS if key == "to" else start
    return validate.instant_ms(float(raw) if _EPOCH.match(raw) else raw, key)


def encode_cursor(node: Node, pos: arch.Position) -> str:
    doc = {"n": node.node_id, "s": node.shard, "d": pos.day, "o": pos.offset, "k": pos.skip}
    return base64.urlsafe_b64encode(orjson.dumps(doc)).decode().rstrip("=")


class Cursor(TypedDict):
    """A next_cursor's fields: node, shard, day file, offset in it, lines to skip."""

    n: str
    s: int | None
    d: str
    o: int
    k: int


def decode_cursor(raw: str) -> Cursor:
    """The cursor's fields, checked for shape; 400 naming `cursor` when it is not one."""
    bad = validate.invalid("cursor is not a next_cursor of GET /v1/archive", field="cursor")
    if len(raw) > CURSOR_CHARS_MAX:
        raise bad
    try:
        doc = orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (binascii.Error, ValueError):
        raise bad from None
    ints = ("o", "k")
    if not (isinstance(doc, dict) and set(doc) == {"n", "s", "d", "o", "k"}
            and isinstance(doc["n"], str) and isinstance(doc["d"], str) and _DAY.match(doc["d"])
            and all(type(doc[k]) is int and 0 <= doc[k] < 2**62 for k in ints)
            and (doc["s"] is None or (type(doc["s"]) is int and 0 <= doc["s"] < 64))):
        raise bad
    return Cursor(n=doc["n"], s=doc["s"], d=doc["d"], o=doc["o"], k=doc["k"])


def parse(q: Mapping[str, str], node: Node) -> arch.Search:
    validate.query(q, PARAMS)
    given = [k for k in ("task_id", "tenant") if k in q]
    if len(given) != 1:
        raise validate.invalid("give exactly one of task_id and tenant",
                               fields=["task_id", "tenant"])
    task_id = validate.task_id(q["task_id"]) if "task_id" in q else None
    tenant = validate.tenant(q["tenant"]) if "tenant" in q else None
    from_ms, to_ms = instant(q, "from"), instant(q, "to")
    if from_ms is not None and to_ms is not None and from_ms > to_ms:
        raise validate.invalid("from is after to", field="to")
    limit = validate.query_int(q, "limit", 1, arch.LIMIT_MAX, arch.LIMIT_DEFAULT)
    start = None
    if "cursor" in q:
        doc = decode_cursor(q["cursor"])
        if doc["n"] != node.node_id or doc["s"] != node.shard:
            where = doc["n"] if doc["s"] is None else f"{doc['n']} (shard {doc['s']})"
            raise validate.invalid(f"this cursor was made by node {where}: follow a search on "
                                   "the node it started on", field="cursor")
        start = arch.Position(doc["d"], doc["o"], doc["k"])
    return arch.Search(task_id=task_id, tenant=tenant, from_ms=from_ms, to_ms=to_ms,
                       limit=limit, start=start)


@routes.get("/v1/archive")
async def archive(request: web.Request) -> web.Response:
    node = node_of(request)
    query = parse(request.query, node)    # bad input first, as everywhere
    configured = getattr(node.config, "archive_dir", None)
    if configured is None:
        raise ApiError("archive_not_configured",
                       f"node {node.node_id} has [archive] enabled = false: it archives "
                       "nothing")
    directory = archive_dir(configured, node.config.node(node.node_id).data_dir)
    page = await asyncio.get_running_loop().run_in_executor(None, arch.search, directory,
                                                            query)
    nxt = None if page.next is None else encode_cursor(node, page.next)
    return respond({"records": page.records, "next_cursor": nxt, "node": node.node_id,
                    "skipped": page.skipped}, node.replica.applied_seq)
