"""GET /v1/audit: the audit trail of operator actions (DESIGN 14.6), newest first.

An admin token reads every entry; a tenant token only its tenant's. A page examines at
most `audit_scan_max` entries, so a rare filter costs a bounded pass under the replica
lock and may answer fewer entries than `limit` with a `next_cursor` to go on from.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from aiohttp import web

from tsched.statemachine.limits import API_LIMITS, LIMITS

from tsched.node import present
from tsched.node.api import validate
from tsched.node.api.jsonio import respond
from tsched.node.api.read_budget import take_page
from tsched.node.api.reads import before_read
from tsched.node.api.scope import tenant_scope
from tsched.node.services import node_of

routes = web.RouteTableDef()

FILTERS = ("since", "actor", "action", "target", "limit", "cursor")
CURSOR_DIGITS_MAX = 19     # an entry id: at most 2**63


class AuditQuery(TypedDict):
    """The page's query (the keywords of `StateMachine.audit_page`)."""

    actor: str | None
    action: str | None
    target: str | None
    limit: int
    since_ms: int | None
    cursor: int | None


def query(q: Mapping[str, str]) -> AuditQuery:
    """The page's query, every value checked and bounded."""
    out: AuditQuery = {
        "actor": validate.text(q.get("actor"), "actor", LIMITS.audit_actor_chars_max, lo=0),
        "action": validate.text(q.get("action"), "action", API_LIMITS.audit_action_chars_max,
                                lo=0),
        "target": validate.text(q.get("target"), "target", API_LIMITS.audit_target_chars_max,
                                lo=0),
        "limit": validate.query_int(q, "limit", 1, validate.LIST_LIMIT_MAX, 100),
        "since_ms": _since(q["since"]) if "since" in q else None,
        "cursor": None,
    }
    if "cursor" in q:
        raw = q["cursor"]
        if not (raw.isascii() and raw.isdigit() and len(raw) <= CURSOR_DIGITS_MAX):
            raise validate.invalid("bad cursor: not one of this listing's", field="cursor")
        out["cursor"] = int(raw)
    return out


def _since(raw: str) -> int:
    value: float | str
    try:
        value = float(raw)
    except ValueError:
        value = raw
    return validate.instant_ms(value, "since")


@routes.get("/v1/audit")
async def audit(request: web.Request) -> web.Response:
    await take_page(request)     # this node's budget of listing pages (api/read_budget.py)
    node = node_of(request)
    relayed = await before_read(request, node, FILTERS)
    if relayed is not None:
        return relayed
    q = query(request.query)
    with node.replica.read() as sm:
        entries, nxt = sm.audit_page(tenant=tenant_scope(request),
                                     scan_max=API_LIMITS.audit_scan_max, **q)
        out, seq = [present.audit_entry(e) for e in entries], sm.seq
    return respond({"entries": out, "next_cursor": None if nxt is None else str(nxt),
                    "item_cursors": [str(e.id) for e in entries]}, seq)
