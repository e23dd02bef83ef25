"""Across shards, the most urgent tasks first (DESIGN.md sections 5.1 and 13).

Before a claim asks the shards for tasks without waiting, the router reads the shards'
*heads* at once: a claim request with the header `X-Tsched-Claim-Head: 1`, which the
shard's leader answers with the effective priority of the most urgent task a claim of that
kind would take there (null: none), leasing nothing and never waiting
(statemachine/heads.py). The shards with work are then asked most urgent first, each for
tasks whose effective priority is at most the next one's head (the claim's own
`priority_max` narrowed, never widened), so the rotation of claims.py only orders shards
whose heads are equal. A shard without work is not asked at all; one whose head could not
be read is asked last, as before heads.

The rotation's first shard (where this kind of claim last found work) is not read: it is
asked first, up to the most urgent head of the others, so it gives its tasks when they are
at least as urgent as any elsewhere (a tie is its, as the rotation would have it). Only
when it gives nothing is its head read, to place it among the others. That is one head
read fewer per claim (S - 1) in the usual case, and S (one empty ask more) when it had
nothing that urgent.
A shard that gave tasks is never asked twice in one claim (the claim's Idempotency-Key
would have it answer its first Claim again). A weighted claim (`tier_weights`), which
cannot be narrowed, reads every shard's head and is asked in their order with its own
body.

A claim may so come back with fewer than `max_tasks` while a shard asked early still has
less urgent work: that work is the next claim's. A claim that names one priority
(`priority_min == priority_max`) reads no heads: every shard's would be the same.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

import orjson
from aiohttp import web

from tsched.node.errors import ApiError
from tsched.node.api.claim_parsing import HEAD_HEADER
from tsched.node.scheduling.claim_request import ClaimRequest
from tsched.node.shards.router import Relayed, Router

log = logging.getLogger("tsched.node.router")

HEAD_TIMEOUT_S = 5.0      # a head read never waits at the shard; a forward at most
UNKNOWN = "unknown"       # a shard whose head could not be read

Head = int | None | str   # a priority, None (no work there) or UNKNOWN
Ask = tuple[int, dict]    # a shard and the claim body to send it


def reads_heads(body: dict, priorities: tuple[int, int], shards: list[int]) -> bool:
    """Whether heads decide this claim's order: more than one shard to ask, and a range
    with more than one priority (or weights, whose tiers differ in urgency)."""
    return len(shards) > 1 and (priorities[0] < priorities[1] or "tier_weights" in body)


class Asks(Protocol):
    """What ask_in_order needs of a claim (node/shards/claim_fanout.py)."""

    async def ask(self, shard: int, sub: dict) -> int: ...     # tasks it gave
    def take(self, shard: int, doc: object) -> None: ...       # an answer with tasks anyway
    def room(self) -> int: ...


async def ask_in_order(r: Router, request: web.Request, shards: list[int], body: dict,
                       req: ClaimRequest, claim: Asks, read: bool = True) -> None:
    """Ask `shards` (in rotation order) for tasks without waiting while the claim has
    room: most urgent first when `read` and heads can tell (reads_heads), else in turn.
    `body`: the claim as sent to each shard; `req`: the same, parsed."""
    priorities = req.priorities
    if not (read and reads_heads(body, priorities, shards)):
        for s in shards:
            if claim.room() <= 0:
                return
            await claim.ask(s, body)
        return
    weighted = "tier_weights" in body     # not narrowed: every head is needed
    found = await read_heads(r, request, shards if weighted else shards[1:], body, claim.take)
    if not weighted and claim.room() > 0:
        capped = narrowed(body, priorities, best(found))
        if await claim.ask(shards[0], capped) == 0 and capped is not body:
            # nothing that urgent there: its head orders it among the others
            found.update(await read_heads(r, request, shards[:1], body, claim.take))
    for s, sub in plan(found, shards, body, priorities):
        if claim.room() <= 0:
            return
        await claim.ask(s, sub)


def best(heads: dict[int, Head]) -> int | None:
    """The most urgent of `heads`, None if no shard has work (or none is known)."""
    known = [h for h in heads.values() if isinstance(h, int)]
    return min(known) if known else None


def plan(heads: dict[int, Head], rotation: list[int], body: dict,
         priorities: tuple[int, int]) -> list[Ask]:
    """The asks in order: the shards of `rotation` with a head, most urgent first (ties in
    rotation order), each up to the next one's; then those of unknown head, with the
    claim's range. Shards without work, or not in `heads`, are left out. Pure:
    tests/unit/node/shards/test_shard_heads.py."""
    known: list[tuple[int, int, int]] = []     # (head, place in the rotation, shard)
    for i, s in enumerate(rotation):
        h = heads.get(s)
        if isinstance(h, int):
            known.append((h, i, s))
    known.sort()
    asks: list[Ask] = []
    for n, (_, _, s) in enumerate(known):
        cap = known[n + 1][0] if n + 1 < len(known) else None
        asks.append((s, narrowed(body, priorities, cap)))
    asks += [(s, body) for s in rotation if heads.get(s) == UNKNOWN]
    return asks


def narrowed(body: dict, priorities: tuple[int, int], cap: int | None) -> dict:
    """`body` asking for effective priorities up to `cap` at most: its `priority_max`
    lowered, never raised, every other field as it is. A weighted claim is not narrowed
    (weights and a range do not go together)."""
    if cap is None or cap >= priorities[1] or cap < priorities[0] or "tier_weights" in body:
        return body
    return dict(body, priority_max=cap)


async def read_heads(r: Router, request: web.Request, shards: list[int], body: dict,
                     take: Callable[[int, object], None]) -> dict[int, Head]:
    """Every shard's head for this claim, read at once. A 4xx every shard would give alike
    (auth, limits) is the claim's answer. `take(shard, doc)` gets an answer that carries
    tasks anyway (a shard that does not know head reads claimed instead; it is not asked
    again in this claim)."""
    sub = orjson.dumps(dict(body, max_tasks=1, wait_s=0))
    answers = await asyncio.gather(*(_head(r, request, s, sub, take) for s in shards))
    return dict(zip(shards, answers))


async def _head(r: Router, request: web.Request, shard: int, sub: bytes,
                take: Callable[[int, object], None]) -> Head:
    try:
        a = await r.send(request, shard, "POST", "/v1/claims", sub, timeout_s=HEAD_TIMEOUT_S,
                         extra_headers={HEAD_HEADER: "1"}, to_leader=True)
    except ApiError as e:
        log.info("event=claim_head_unavailable shard=%d code=%s", shard, e.code)
        return UNKNOWN
    if a.status != 200:
        if 400 <= a.status < 500 and a.status != 429:
            raise Relayed(a)
        return UNKNOWN
    doc = a.json()
    if not isinstance(doc, dict):
        return UNKNOWN
    if "head" not in doc:
        if doc.get("tasks"):
            take(shard, doc)
            return None     # not asked again: its next Claim would replay this one
        return UNKNOWN
    found = doc["head"]
    return found if found is None or type(found) is int else UNKNOWN
