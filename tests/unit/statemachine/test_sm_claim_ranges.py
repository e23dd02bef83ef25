"""Claims by priority range (DESIGN section 5) and a failure's retry_after_ms."""
from __future__ import annotations

import random

from sm_support import T0, Driver

from tsched.statemachine import commands as c

AGING = 600_000


def ids(tasks) -> list[str]:
    return [t.task_id for t in tasks]


def mixed(d: Driver) -> None:
    for p in range(11):
        d.add(f"p{p}a", priority=p)
        d.add(f"p{p}b", priority=p)


def test_range_takes_only_its_priorities_in_claim_order() -> None:
    d = Driver()
    mixed(d)
    assert ids(d.claim(max_tasks=100, priority_min=4, priority_max=6)) == [
        "p4a", "p4b", "p5a", "p5b", "p6a", "p6b"]
    assert ids(d.claim(max_tasks=100, priority_min=0, priority_max=0)) == ["p0a", "p0b"]
    assert ids(d.claim(max_tasks=100, priority_min=10, priority_max=10)) == ["p10a", "p10b"]
    assert ids(d.claim(max_tasks=100, priority_min=4, priority_max=6)) == []   # empty range
    assert ids(d.claim(max_tasks=3)) == ["p1a", "p1b", "p2a"]   # no range: as before


def test_range_follows_aging_at_its_boundaries() -> None:
    d = Driver()
    # waited exactly 2 intervals: 9 -> 7; waited one ms less: still 8
    d.add("aged7", priority=9, run_at_ms=T0 - 2 * AGING)
    d.add("aged8", priority=9, run_at_ms=T0 - 2 * AGING + 1)
    d.add("fresh9", priority=9)
    d.add("floor0", priority=3, run_at_ms=T0 - 50 * AGING)   # clamped at 0
    assert ids(d.claim(max_tasks=10, priority_min=8, priority_max=9)) == ["aged8", "fresh9"]
    assert ids(d.claim(max_tasks=10, priority_min=1, priority_max=7)) == ["aged7"]
    assert ids(d.claim(max_tasks=10, priority_min=0, priority_max=0)) == ["floor0"]


def test_range_peek_matches_selection() -> None:
    d = Driver()
    d.add("low", priority=8)
    assert not d.sm.has_claimable(("email",), None, 0, d.now, (0, 3))
    assert d.sm.has_claimable(("email",), None, 0, d.now, (7, 9))
    d.now += 5 * AGING   # 8 ages into 3
    assert d.sm.has_claimable(("email",), None, 0, d.now, (0, 3))
    assert not d.sm.has_claimable(("email",), None, 0, d.now, (7, 9))
    assert ids(d.claim(priority_min=7, priority_max=9)) == []
    assert ids(d.claim(priority_min=0, priority_max=3)) == ["low"]


def test_range_sees_due_tasks_behind_an_out_of_range_one_and_prefetch() -> None:
    d = Driver()
    d.add("hi", priority=1, run_at_ms=T0 + 1_000)
    d.add("lo", priority=8, run_at_ms=T0 + 2_000)
    d.add("soon", priority=8, run_at_ms=T0 + 2_500)
    d.now += 2_000
    assert d.sm.has_claimable(("email",), None, 0, d.now, (7, 10))
    assert not d.sm.has_claimable(("email",), None, 0, d.now, (2, 6))
    assert ids(d.claim(max_tasks=5, prefetch_ms=600, priority_min=7)) == ["lo", "soon"]
    assert ids(d.claim(max_tasks=5, priority_max=6)) == ["hi"]


def test_range_selection_is_deterministic_and_removes_cleanly() -> None:
    rng = random.Random(7)
    drivers = [Driver(), Driver()]
    for n in range(300):
        p, age = rng.randrange(11), rng.randrange(0, 8 * AGING)
        for d in drivers:
            d.add(f"t{n}", priority=p, run_at_ms=T0 - age)
    seen: set[str] = set()
    for _ in range(60):
        lo = rng.randrange(11)
        hi = rng.randrange(lo, 11)
        got = [ids(d.claim(max_tasks=4, priority_min=lo, priority_max=hi)) for d in drivers]
        assert got[0] == got[1]
        for tid in got[0]:
            task = drivers[0].sm.store.tasks[tid]
            eff = max(0, task.priority - (drivers[0].now - task.run_at_ms) // AGING)
            assert lo <= eff <= hi and tid not in seen
            seen.add(tid)
    rest: list[str] = []   # the heaps stayed heaps: the rest comes out, each once
    while batch := ids(drivers[0].claim(max_tasks=100)):
        rest += batch
    assert len(rest) + len(seen) == 300 and not seen & set(rest)


def test_bad_range_is_refused_naming_the_field() -> None:
    d = Driver()
    for fields, name in (({"priority_min": 5, "priority_max": 4}, "priority_max"),
                         ({"priority_min": -1}, "priority_min"),
                         ({"priority_max": 11}, "priority_max"),
                         ({"priority_min": "1"}, "priority_min")):
        r = d.run(c.Claim, worker_id="w", task_types=("email",), **fields)
        assert not r.ok and r.details["field"] == name, (fields, r)


def test_retry_after_sets_the_next_attempt_time() -> None:
    d = Driver()
    d.add("t", max_retries=2, retry=c.RetryPolicy(base_ms=1_000, max_ms=60_000))
    task = d.claim_one()
    r = d.run(c.Fail, task_id="t", fencing_token=task.fencing_token, error="429",
              retry_after_ms=90_000)
    assert not r.ok and r.details["field"] == "retry_after_s"          # over the task's max backoff
    d.ok(c.Fail, task_id="t", fencing_token=task.fencing_token, error="429",
         retry_after_ms=45_000)
    task = d.sm.store.tasks["t"]
    assert task.state == "pending" and task.run_at_ms == d.now + 45_000 and task.failures == 1
    d.now += 44_999
    assert d.claim() == []
    d.now += 1
    assert ids(d.claim()) == ["t"]
