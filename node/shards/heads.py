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
asked first, up to the most urgent head of the others. It so gives its tasks when they
are at least as urgent as any elsewhere (a tie goes to it, as the rotation would), and
nothing otherwise, the others following in order of their heads and it last, with the
claim's range as it is. That is one head read fewer per claim (S - 1), for one empty ask
when it has nothing that urgent. A weighted claim (`tier_weights`), which cannot be
narrowed, reads every shard's head and is asked in their order with its own body.

A claim may so come back with fewer than `max_tasks` while a shard asked early still has
less urgent work: that work is the next claim's. A claim that names one priority
(`priority_min == priority_max`) reads no heads: every shard's would be the same.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson

from tsched.node.errors import ApiError
from tsched.node.scheduling.claims import HEAD_HEADER
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


async def ordered(r: Router, request: Any, shards: list[int], body: dict,
                  priorities: tuple[int, int], take: Callable[[int, Any], None]) -> list[Ask]:
    """The asks of a claim, in order, from the heads of `shards` (in rotation order)."""
    if "tier_weights" in body:            # not narrowed: every head is needed
        return plan(None, await read_heads(r, request, shards, body, take), shards, body,
                    priorities)
    others = shards[1:]
    found = await read_heads(r, request, others, body, take)
    return plan(shards[0], found, others, body, priorities)


def plan(first: int | None, heads: dict[int, Head], rotation: list[int], body: dict,
         priorities: tuple[int, int]) -> list[Ask]:
    """The asks in order: `first` (if any: its head not read) up to the most urgent of
    `heads`; the shards of `rotation` with a head, most urgent first (ties in rotation
    order), each up to the next one's; `first` again with the claim's range, if it was
    narrowed; those of unknown head. Shards without work are left out. Pure:
    tests/unit/node/shards/test_shard_heads.py."""
    known: list[tuple[int, int, int]] = []     # (head, place in the rotation, shard)
    for i, s in enumerate(rotation):
        h = heads.get(s)
        if isinstance(h, int):
            known.append((h, i, s))
    known.sort()
    asks: list[Ask] = []
    if first is not None:
        asks.append((first, narrowed(body, priorities, known[0][0] if known else None)))
    for n, (_, _, s) in enumerate(known):
        cap = known[n + 1][0] if n + 1 < len(known) else None
        asks.append((s, narrowed(body, priorities, cap)))
    if first is not None and asks[0][1] is not body:
        asks.append((first, body))
    asks += [(s, body) for s in rotation if heads.get(s) == UNKNOWN]
    return asks


def narrowed(body: dict, priorities: tuple[int, int], cap: int | None) -> dict:
    """`body` asking for effective priorities up to `cap` at most: its `priority_max`
    lowered, never raised, every other field as it is. A weighted claim is not narrowed
    (weights and a range do not go together)."""
    if cap is None or cap >= priorities[1] or cap < priorities[0] or "tier_weights" in body:
        return body
    return dict(body, priority_max=cap)


async def read_heads(r: Router, request: Any, shards: list[int], body: dict,
                     take: Callable[[int, Any], None]) -> dict[int, Head]:
    """Every shard's head for this claim, read at once. A 4xx every shard would give alike
    (auth, limits) is the claim's answer. `take(shard, doc)` gets an answer that carries
    tasks anyway (a shard that does not know head reads claimed instead)."""
    sub = orjson.dumps(dict(body, max_tasks=1, wait_s=0))
    answers = await asyncio.gather(*(_head(r, request, s, sub, take) for s in shards))
    return dict(zip(shards, answers))


async def _head(r: Router, request: Any, shard: int, sub: bytes,
                take: Callable[[int, Any], None]) -> Head:
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
    if doc.get("tasks"):
        take(shard, doc)
    if "head" not in doc:
        return UNKNOWN
    found = doc["head"]
    return found if found is None or type(found) is int else UNKNOWN
