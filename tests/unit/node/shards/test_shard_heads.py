"""The router's order of shards for a claim (node/shards/heads.py): most urgent head first,
each shard asked up to the next one's head, the rotation breaking ties (DESIGN.md 5.1, 13)."""
from __future__ import annotations

import asyncio

import orjson

from tsched.node.scheduling.claim_request import ClaimRequest
from tsched.node.shards.heads import UNKNOWN, ask_in_order, narrowed, plan, reads_heads
from tsched.node.shards.upstream import Answer

BODY = {"worker_id": "w", "task_types": ["email"], "max_tasks": 5, "lease_s": 30}
ALL = (0, 10)
REQ = ClaimRequest(worker_id="w", task_types=("email",), max_tasks=5, priorities=ALL)


def caps(asks) -> list[tuple[int, int | None]]:
    return [(s, body.get("priority_max")) for s, body in asks]


def test_most_urgent_shard_first_capped_at_the_next_head():
    asks = plan({0: 5, 1: 5, 2: 0}, [0, 1, 2], BODY, ALL)
    assert caps(asks) == [(2, 5), (0, 5), (1, None)]
    asks = plan({0: 7, 1: 3, 2: 9}, [0, 1, 2], BODY, ALL)
    assert caps(asks) == [(1, 7), (0, 9), (2, None)]


def test_rotation_breaks_ties_only():
    heads = {0: 4, 1: 4, 2: 4}
    assert [s for s, _ in plan(heads, [1, 2, 0], BODY, ALL)] == [1, 2, 0]
    assert [s for s, _ in plan(heads, [2, 0, 1], BODY, ALL)] == [2, 0, 1]
    assert [s for s, _ in plan({0: 4, 1: 2, 2: 4}, [2, 0, 1], BODY, ALL)] == [1, 2, 0]


def test_shards_without_work_are_not_asked_and_unknown_ones_last_uncapped():
    asks = plan({0: None, 1: 6, 2: UNKNOWN, 3: 2}, [2, 3, 0, 1], BODY, ALL)
    assert caps(asks) == [(3, 6), (1, None), (2, None)]
    assert plan({0: None, 1: None}, [0, 1], BODY, ALL) == []


class FakeShards:
    """Shards as the router sees them: each answers a head read with its head, and a claim
    with as many tasks as it holds at or under the body's priority_max (`tasks`: shard ->
    the priorities it holds). Records what was sent."""

    def __init__(self, tasks: dict[int, list[int]]) -> None:
        self.tasks = tasks
        self.reads: list[int] = []
        self.asks: list[tuple[int, int | None]] = []
        self.got: list[int] = []
        self.max_tasks = 10

    async def send(self, request, shard, method, path, body, timeout_s=None,
                   extra_headers=None, to_leader=False) -> Answer:
        self.reads.append(shard)
        held = self.tasks[shard]
        doc = {"tasks": [], "head": min(held) if held else None}
        return Answer(200, orjson.dumps(doc), "application/json", {})

    async def ask(self, shard: int, sub: dict) -> int:
        cap = sub.get("priority_max")
        self.asks.append((shard, cap))
        held = sorted(self.tasks[shard])
        taken = [p for p in held if cap is None or p <= cap][:self.room()]
        for p in taken:
            held.remove(p)
        self.tasks[shard] = held
        self.got += taken
        return len(taken)

    def take(self, shard: int, doc) -> None:
        raise AssertionError("no shard claims on a head read here")

    def room(self) -> int:
        return self.max_tasks - len(self.got)


def run(shards: FakeShards, order: list[int], body=BODY, max_tasks=10) -> FakeShards:
    shards.max_tasks = max_tasks
    asyncio.run(ask_in_order(shards, None, order, body, REQ, shards))
    return shards


def test_the_rotation_s_first_shard_is_asked_up_to_the_others_best_head_unread():
    """Its head is not read: it gives what is at least as urgent as the best elsewhere (a
    tie is its), then the others follow in order of their heads."""
    got = run(FakeShards({0: [5, 5], 1: [7], 2: [5, 9]}), [0, 1, 2])
    assert got.reads == [1, 2] and got.asks == [(0, 5), (2, 7), (1, None)]
    assert got.got == [5, 5, 5, 7]          # shard 2's 9 is less urgent than shard 1's 7
    got = run(FakeShards({0: [5], 1: [5], 2: [5]}), [0, 1, 2], max_tasks=1)
    assert got.reads == [1, 2] and got.asks == [(0, 5)] and got.got == [5]


def test_a_first_shard_with_nothing_that_urgent_is_read_and_placed_among_the_others():
    got = run(FakeShards({0: [8, 8], 1: [0], 2: [5]}), [0, 1, 2], max_tasks=1)
    assert got.got == [0] and got.asks == [(0, 0), (1, 5)]
    got = run(FakeShards({0: [8, 8], 1: [0], 2: [5]}), [0, 1, 2])
    assert got.reads == [1, 2, 0]
    assert got.asks == [(0, 0), (1, 5), (2, 8), (0, None)]
    assert got.got == [0, 5, 8, 8]
    # nothing anywhere else: asked once, with the claim's range
    got = run(FakeShards({0: [8], 1: [], 2: []}), [0, 1, 2])
    assert got.asks == [(0, None)] and got.got == [8]


def test_no_shard_that_gave_tasks_is_asked_again_in_one_claim():
    """A second ask would carry the claim's Idempotency-Key: the shard would answer its
    first Claim again."""
    got = run(FakeShards({0: [2, 8, 8], 1: [5]}), [0, 1])
    assert got.asks == [(0, 5), (1, None)] and got.got == [2, 5]


def test_without_heads_the_shards_are_asked_in_turn():
    got = FakeShards({0: [9], 1: [0]})
    got.max_tasks = 1
    asyncio.run(ask_in_order(got, None, [0, 1], BODY, REQ, got, read=False))
    assert got.reads == [] and got.asks == [(0, None)] and got.got == [9]


def test_the_caller_s_range_is_narrowed_never_widened_and_other_fields_pass():
    body = dict(BODY, priority_min=2, priority_max=6, tier_hint="kept")
    assert narrowed(body, (2, 6), 4) == dict(body, priority_max=4)
    assert narrowed(body, (2, 6), 6) is body
    assert narrowed(body, (2, 6), 9) is body        # the next head is outside: no change
    assert narrowed(body, (2, 6), None) is body
    asks = plan({0: 3, 1: 8}, [0, 1], BODY, ALL)
    assert asks[0][1] == dict(BODY, priority_max=8) and asks[1][1] is BODY
    assert BODY.get("priority_max") is None           # the caller's body is not changed


def test_weighted_claims_are_ordered_but_not_narrowed():
    body = dict(BODY, tier_weights={"critical": 5, "normal": 1})
    asks = plan({0: 5, 1: 0}, [0, 1], body, ALL)
    assert [s for s, _ in asks] == [1, 0]
    assert all(b is body for _, b in asks)


def test_heads_are_read_only_when_they_can_change_the_order():
    assert reads_heads(BODY, ALL, [0, 1])
    assert not reads_heads(BODY, ALL, [0])            # one shard: nothing to compare
    assert not reads_heads(BODY, (5, 5), [0, 1, 2])   # one priority: every head the same
    assert reads_heads(dict(BODY, tier_weights={"low": 1}), ALL, [0, 1])
