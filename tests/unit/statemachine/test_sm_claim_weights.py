"""Weighted polling by tier (DESIGN section 5.1): Claim.tier_weights."""
from __future__ import annotations

import random
from collections import Counter

import msgpack
from sm_support import T0, Driver

from tsched.statemachine import codec
from tsched.statemachine import commands as c

AGING = 600_000
# the default table's critical, high, normal, low as (lo, hi, weight)
WEIGHTS = ((0, 0, 50), (1, 3, 30), (4, 6, 15), (7, 9, 5))
TIER_OF = {0: "critical", 1: "high", 2: "high", 3: "high", 4: "normal", 5: "normal",
           6: "normal", 7: "low", 8: "low", 9: "low", 10: "batch"}


def fill(d: Driver, per_tier: dict[int, int], tenants=("acme",)) -> None:
    """`per_tier[p]` tasks of priority p (one priority per tier), round robin over tenants."""
    n = 0
    for p, count in per_tier.items():
        for i in range(count):
            d.add(f"p{p}-{i}", priority=p, tenant=tenants[n % len(tenants)])
            n += 1


def split(d: Driver, tasks) -> Counter:
    return Counter(TIER_OF[d.sm.store.tasks[t.task_id].priority] for t in tasks)


def test_a_claim_of_100_splits_50_30_15_5() -> None:
    d = Driver()
    fill(d, {0: 120, 2: 120, 5: 120, 8: 120, 10: 50})
    got = d.claim(max_tasks=100, tier_weights=WEIGHTS)
    assert len(got) == 100
    counts = split(d, got)
    assert counts == {"critical": 50, "high": 30, "normal": 15, "low": 5}


def test_the_split_holds_over_several_tenants_and_claims() -> None:
    d = Driver()
    fill(d, {0: 150, 3: 150, 6: 150, 9: 150}, tenants=("a", "b", "c"))
    counts: Counter = Counter()
    for _ in range(4):
        counts += split(d, d.claim(max_tasks=25, tier_weights=WEIGHTS))
    # credits start at 0 per claim: four claims of 25 split like one of 100 to within one
    # task per claim and tier
    for name, share in (("critical", 50), ("high", 30), ("normal", 15), ("low", 5)):
        assert abs(counts[name] - share) <= 4, counts


def test_within_a_tier_the_claim_order_holds() -> None:
    d = Driver()
    d.add("h3", priority=3)
    d.add("h1", priority=1)
    d.add("h2", priority=2)
    d.add("c0", priority=0)
    got = [t.task_id for t in d.claim(max_tasks=4, tier_weights=((0, 0, 1), (1, 3, 1)))]
    assert got == ["c0", "h1", "h2", "h3"]


def test_one_task_at_a_time_takes_the_most_urgent_tier_first() -> None:
    d = Driver()
    fill(d, {0: 3, 8: 3})
    got = [d.claim_one(tier_weights=((0, 0, 1), (7, 9, 1000))) for _ in range(2)]
    assert [t.task_id for t in got] == ["p8-0", "p8-1"]   # most credit: low's weight
    got = [d.claim_one(tier_weights=((0, 0, 5), (7, 9, 5))) for _ in range(2)]
    assert [t.task_id for t in got] == ["p0-0", "p0-1"]   # a tie: the more urgent


def test_an_empty_tier_gives_its_share_away() -> None:
    d = Driver()
    fill(d, {0: 200, 2: 10, 5: 200, 8: 200})
    counts = split(d, d.claim(max_tasks=100, tier_weights=WEIGHTS))
    assert counts["high"] == 10   # all it had
    assert sum(counts.values()) == 100
    # the other 20 of high's share went to the others, in their proportions (50:15:5)
    assert counts["critical"] >= 60 and counts["normal"] >= 17 and counts["low"] >= 5
    d = Driver()
    fill(d, {0: 200, 5: 200, 8: 200})   # high empty from the start: 50:15:5 of 100
    counts = split(d, d.claim(max_tasks=100, tier_weights=WEIGHTS))
    for name, share in (("critical", 100 * 50 / 70), ("normal", 100 * 15 / 70),
                        ("low", 100 * 5 / 70)):
        assert abs(counts[name] - share) <= 1, counts


def test_only_the_named_tiers_are_taken() -> None:
    d = Driver()
    fill(d, {0: 5, 2: 5, 5: 5, 8: 5, 10: 5})
    counts = split(d, d.claim(max_tasks=100, tier_weights=((1, 3, 10), (10, 10, 1))))
    assert counts == {"high": 5, "batch": 5}
    assert d.claim(max_tasks=100, tier_weights=((1, 3, 10), (10, 10, 1))) == []


def test_aging_moves_a_task_into_the_next_tier() -> None:
    d = Driver()
    d.add("aged", priority=7, run_at_ms=T0 - 3 * AGING)   # effective 4: normal
    d.add("fresh", priority=7)
    assert [t.task_id for t in d.claim(max_tasks=5, tier_weights=((4, 6, 1),))] == ["aged"]
    assert d.sm.has_claimable(("email",), None, 0, d.now, tier_weights=((7, 9, 1),))
    assert not d.sm.has_claimable(("email",), None, 0, d.now, tier_weights=((0, 6, 1),))


def test_peek_answers_for_the_union_of_tiers() -> None:
    d = Driver()
    d.add("n", priority=5)
    assert d.sm.has_claimable(("email",), None, 0, d.now, tier_weights=((0, 0, 1), (4, 6, 1)))
    assert not d.sm.has_claimable(("email",), None, 0, d.now,
                                  tier_weights=((0, 0, 1), (7, 9, 1)))


def test_early_dispatch_takes_the_named_tiers_only() -> None:
    d = Driver()
    d.add("soon-low", priority=8, run_at_ms=T0 + 300)
    d.add("soon-normal", priority=5, run_at_ms=T0 + 200)
    d.add("due-critical", priority=0)
    got = d.claim(max_tasks=5, prefetch_ms=500, tier_weights=((0, 0, 1), (7, 9, 1)))
    assert [t.task_id for t in got] == ["due-critical", "soon-low"]


def test_tenant_caps_hold() -> None:
    d = Driver()
    d.ok(c.SetTenant, tenant="acme", max_running=3)
    fill(d, {0: 10, 5: 10})
    assert len(d.claim(max_tasks=100, tier_weights=((0, 0, 1), (4, 6, 1)))) == 3


def _commands(seed: int) -> list[c.Command]:
    rng = random.Random(seed)
    cmds: list[c.Command] = []
    now = T0
    for n in range(400):
        cmds.append(c.SubmitTask(request_id=f"s{n}", now_ms=now, task_id=f"t{n}",
                                 tenant=rng.choice(("a", "b")), task_type="email",
                                 priority=rng.randrange(11),
                                 run_at_ms=now - rng.randrange(0, 6 * AGING)))
    for n in range(40):
        now += rng.randrange(1, 5_000)
        weights = tuple((lo, hi, rng.randrange(1, 1001)) for lo, hi in
                        ((0, 0), (1, 3), (4, 6), (7, 9), (10, 10)) if rng.random() < 0.7)
        cmds.append(c.Claim(request_id=f"c{n}", now_ms=now, worker_id="w",
                            task_types=("email",), max_tasks=rng.randrange(1, 20),
                            tier_weights=weights))
    return cmds


def test_same_commands_same_digest_on_two_machines() -> None:
    cmds = _commands(11)
    blob = codec.encode_batch(cmds)
    a, b = Driver().sm, Driver().sm
    a.apply_batch(codec.decode_batch(blob))
    b.apply_batch(codec.decode_batch(blob))
    assert a.digest() == b.digest() and a.state_digest() == b.state_digest()
    claimed = [t for t in a.store.tasks.values() if t.state == "running"]
    assert claimed and len({t.task_id for t in claimed}) == len(claimed)


def test_codec_round_trip_and_the_default_encoding_is_unchanged() -> None:
    weighted = c.Claim(request_id="r", now_ms=T0, worker_id="w", task_types=("email",),
                       tier_weights=WEIGHTS)
    plain = c.Claim(request_id="r", now_ms=T0, worker_id="w", task_types=("email",))
    decoded = codec.decode_batch(codec.encode_batch([weighted, plain]))
    assert list(decoded) == [weighted, plain]
    assert decoded[0].tier_weights == WEIGHTS and type(decoded[0].tier_weights[0]) is tuple
    # the default claim encodes as before tier_weights existed: no trailing field
    items = msgpack.unpackb(codec.encode_batch([plain]), raw=False)
    assert items[1] == ["Claim", "r", T0, "w", ["email"], 1, 30_000, 0, None]
    # an entry written before (with or without the priority range) decodes as no weights
    for old, prio in ((["Claim", "r", T0, "w", ["email"], 1, 30_000, 0, None], (0, 10)),
                      (["Claim", "r", T0, "w", ["email"], 1, 30_000, 0, None, 2, 5], (2, 5))):
        cmd = codec.decode_batch(msgpack.packb([2, old]))[0]
        assert cmd.tier_weights == () and (cmd.priority_min, cmd.priority_max) == prio


def test_bad_weights_are_refused_naming_the_field() -> None:
    d = Driver()
    bad = [((0, 0, 0),), ((0, 0, 1001),), ((0, 0, True),), ((0, 0, 1.5),), ((3, 1, 1),),
           ((1, 3, 1), (0, 0, 1)), ((1, 3, 1), (3, 5, 1)), ((0, 11, 1),), ((-1, 0, 1),),
           ((0, 0),), [(0, 0, 1)], ((0, 0, "1"),), ("x",)]
    for weights in bad:
        r = d.run(c.Claim, worker_id="w", task_types=("email",), tier_weights=weights)
        assert not r.ok and r.details["field"] == "tier_weights", (weights, r)
    r = d.run(c.Claim, worker_id="w", task_types=("email",), tier_weights=((0, 0, 1),),
              priority_max=5)
    assert not r.ok and r.details["field"] == "tier_weights"


def _reference(d: Driver, max_tasks: int, weights) -> list[str]:
    """The rule of DESIGN 5.1 spelled out with one-task range claims: per task, every tier
    with claimable work adds its weight; the most credit (first on a tie) gives a task."""
    credit = [0] * len(weights)
    active = list(range(len(weights)))
    out: list[str] = []
    while len(out) < max_tasks:
        active = [k for k in active if d.sm.has_claimable(
            ("email",), None, 0, d.now, (weights[k][0], weights[k][1]))]
        if not active:
            break
        total = sum(weights[k][2] for k in active)
        for k in active:
            credit[k] += weights[k][2]
        pick = max(active, key=lambda k: (credit[k], -k))
        credit[pick] -= total
        (task,) = d.claim(priority_min=weights[pick][0], priority_max=weights[pick][1])
        out.append(task.task_id)
    return out


def test_selection_matches_the_rule_spelled_out() -> None:
    rng = random.Random(5)
    for _ in range(12):
        a, b = Driver(), Driver()
        cap = rng.randrange(5, 40)
        for d in (a, b):
            d.ok(c.SetTenant, tenant="t1", max_running=cap, weight=2)
        for n in range(rng.randrange(50, 300)):
            fields = {"priority": rng.randrange(11), "tenant": rng.choice(("t0", "t1", "t2")),
                      "run_at_ms": T0 - rng.randrange(0, 5 * AGING)}
            for d in (a, b):
                d.add(f"x{n}", **fields)
        tiers = [(0, 0), (1, 3), (4, 6), (7, 9), (10, 10)]
        weights = tuple((lo, hi, rng.randrange(1, 60)) for lo, hi in tiers
                        if rng.random() < 0.75) or ((4, 6, 1),)
        want = rng.randrange(1, 101)
        got = [t.task_id for t in a.claim(max_tasks=want, tier_weights=weights)]
        assert got == _reference(b, want, weights), weights


def test_taken_entries_leave_their_heaps_and_the_heaps_stay_heaps() -> None:
    rng = random.Random(3)
    d = Driver()
    for n in range(600):
        d.add(f"y{n}", priority=rng.randrange(11), tenant=rng.choice(("a", "b")),
              run_at_ms=T0 - rng.randrange(0, 6 * AGING))
    seen: set[str] = set()
    for _ in range(15):
        weights = tuple((lo, hi, rng.randrange(1, 100)) for lo, hi in
                        ((0, 0), (1, 3), (4, 6), (7, 9), (10, 10)) if rng.random() < 0.6)
        for t in d.claim(max_tasks=rng.randrange(1, 40), tier_weights=weights or WEIGHTS):
            assert t.task_id not in seen
            seen.add(t.task_id)
        for buckets in d.sm.store.queue.by_type.values():
            for bucket in buckets.values():
                heap = bucket.ready
                assert all(heap[(i - 1) >> 1] <= heap[i] for i in range(1, len(heap)))
                assert all(e[-1].task_id not in seen for e in heap)
    rest: list[str] = []
    while batch := d.claim(max_tasks=100):
        rest += [t.task_id for t in batch]
    assert len(rest) + len(seen) == 600 and not seen & set(rest)
