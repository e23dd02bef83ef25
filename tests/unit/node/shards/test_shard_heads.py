"""The router's order of shards for a claim (node/shards/heads.py): most urgent head first,
each shard asked up to the next one's head, the rotation breaking ties (DESIGN.md 5.1, 13)."""
from __future__ import annotations

from tsched.node.shards.heads import UNKNOWN, narrowed, plan, reads_heads

BODY = {"worker_id": "w", "task_types": ["email"], "max_tasks": 5, "lease_s": 30}
ALL = (0, 10)


def caps(asks) -> list[tuple[int, int | None]]:
    return [(s, body.get("priority_max")) for s, body in asks]


def test_most_urgent_shard_first_capped_at_the_next_head():
    asks = plan(None, {0: 5, 1: 5, 2: 0}, [0, 1, 2], BODY, ALL)
    assert caps(asks) == [(2, 5), (0, 5), (1, None)]
    asks = plan(None, {0: 7, 1: 3, 2: 9}, [0, 1, 2], BODY, ALL)
    assert caps(asks) == [(1, 7), (0, 9), (2, None)]


def test_rotation_breaks_ties_only():
    heads = {0: 4, 1: 4, 2: 4}
    assert [s for s, _ in plan(None, heads, [1, 2, 0], BODY, ALL)] == [1, 2, 0]
    assert [s for s, _ in plan(None, heads, [2, 0, 1], BODY, ALL)] == [2, 0, 1]
    assert [s for s, _ in plan(None, {0: 4, 1: 2, 2: 4}, [2, 0, 1], BODY, ALL)] == [1, 2, 0]


def test_shards_without_work_are_not_asked_and_unknown_ones_last_uncapped():
    asks = plan(None, {0: None, 1: 6, 2: UNKNOWN, 3: 2}, [2, 3, 0, 1], BODY, ALL)
    assert caps(asks) == [(3, 6), (1, None), (2, None)]
    assert plan(None, {0: None, 1: None}, [0, 1], BODY, ALL) == []


def test_the_rotation_s_first_shard_is_asked_first_up_to_the_others_most_urgent_head():
    """Its head is not read: it gives what is at least as urgent as the best elsewhere (a
    tie is its), then the others in order of their heads, then it again, unnarrowed."""
    asks = plan(1, {0: 5, 2: 0}, [0, 2], BODY, ALL)
    assert caps(asks) == [(1, 0), (2, 5), (0, None), (1, None)]
    asks = plan(1, {0: 5, 2: 5}, [2, 0], BODY, ALL)
    assert caps(asks) == [(1, 5), (2, 5), (0, None), (1, None)]
    # the others have nothing (or nothing known): it is asked once, with the claim's range
    assert caps(plan(1, {0: None, 2: None}, [0, 2], BODY, ALL)) == [(1, None)]
    assert caps(plan(1, {0: None, 2: UNKNOWN}, [0, 2], BODY, ALL)) == [(1, None), (2, None)]
    # the others' best is at the claim's own upper bound: nothing to narrow, asked once
    body = dict(BODY, priority_max=6)
    assert caps(plan(1, {0: 6}, [0], body, (0, 6))) == [(1, 6), (0, 6)]


def test_the_caller_s_range_is_narrowed_never_widened_and_other_fields_pass():
    body = dict(BODY, priority_min=2, priority_max=6, tier_hint="kept")
    assert narrowed(body, (2, 6), 4) == dict(body, priority_max=4)
    assert narrowed(body, (2, 6), 6) is body
    assert narrowed(body, (2, 6), 9) is body        # the next head is outside: no change
    assert narrowed(body, (2, 6), None) is body
    asks = plan(None, {0: 3, 1: 8}, [0, 1], BODY, ALL)
    assert asks[0][1] == dict(BODY, priority_max=8) and asks[1][1] is BODY
    assert BODY.get("priority_max") is None           # the caller's body is not changed


def test_weighted_claims_are_ordered_but_not_narrowed():
    body = dict(BODY, tier_weights={"critical": 5, "normal": 1})
    asks = plan(None, {0: 5, 1: 0}, [0, 1], body, ALL)
    assert [s for s, _ in asks] == [1, 0]
    assert all(b is body for _, b in asks)


def test_heads_are_read_only_when_they_can_change_the_order():
    assert reads_heads(BODY, ALL, [0, 1])
    assert not reads_heads(BODY, ALL, [0])            # one shard: nothing to compare
    assert not reads_heads(BODY, (5, 5), [0, 1, 2])   # one priority: every head the same
    assert reads_heads(dict(BODY, tier_weights={"low": 1}), ALL, [0, 1])
