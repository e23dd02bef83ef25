"""A claim's head (statemachine/heads.py): the effective priority of the most urgent task
a claim of a kind would take, read without changing anything (DESIGN sections 5.1, 13)."""
from __future__ import annotations

import random

from sm_support import T0, Driver

from tsched.statemachine import commands as c
from tsched.statemachine.rules import effective_priority, static_key

AGING = 600_000
EMAIL = ("email",)


def head(d: Driver, types=EMAIL, tenant=None, prefetch_ms=0, priorities=(0, 10)):
    return d.sm.claim_head(types, tenant, prefetch_ms, d.now, priorities)


def eff(task, now_ms: int) -> int:
    return effective_priority(static_key(task.priority, task.run_at_ms, AGING), now_ms, AGING)


def test_empty_queue_and_other_types_have_no_head() -> None:
    d = Driver()
    assert head(d) is None
    d.add("a", priority=4, task_type="sms")
    assert head(d) is None
    assert head(d, types=("sms", "email")) == 4


def test_head_is_the_most_urgent_effective_priority() -> None:
    d = Driver()
    for i, p in enumerate((7, 5, 9, 5)):
        d.add(f"t{i}", priority=p)
    assert head(d) == 5
    d.add("crit", priority=0)
    assert head(d) == 0
    assert d.claim_one().task_id == "crit"
    assert head(d) == 5


def test_head_follows_the_range() -> None:
    d = Driver()
    for p in (0, 3, 6, 9):
        d.add(f"p{p}", priority=p)
    assert head(d, priorities=(0, 10)) == 0
    assert head(d, priorities=(1, 10)) == 3
    assert head(d, priorities=(4, 6)) == 6
    assert head(d, priorities=(7, 8)) is None
    assert head(d, priorities=(10, 10)) is None


def test_head_follows_aging() -> None:
    d = Driver()
    d.add("old9", priority=9, run_at_ms=T0 - 2 * AGING)   # waited two intervals: 7
    d.add("new8", priority=8)
    assert head(d) == 7
    assert head(d, priorities=(8, 10)) == 8
    d.now += 7 * AGING                                    # 9 -> 0 (clamped), 8 -> 1
    assert head(d) == 0
    assert head(d, priorities=(1, 10)) == 1


def test_head_of_a_tenant_and_of_tenants_at_their_cap() -> None:
    d = Driver()
    d.add("a1", tenant="acme", priority=2)
    d.add("b1", tenant="beta", priority=6)
    assert head(d, tenant="beta") == 6
    assert head(d, tenant="gone") is None
    d.ok(c.SetTenant, tenant="acme", max_running=1)
    assert d.claim_one(tenant="acme").task_id == "a1"
    d.add("a2", tenant="acme", priority=0)
    assert head(d) == 6                       # acme is at its cap: its work is not claimable
    assert head(d, tenant="acme") is None


def test_due_tasks_not_yet_moved_to_ready_count_and_are_left_where_they_are() -> None:
    d = Driver()
    d.add("now5", priority=5)
    d.add("later1", priority=1, run_at_ms=T0 + 1_000)
    d.add("later3", priority=3, run_at_ms=T0 + 500)
    assert head(d) == 5
    d.now += 1_000                            # both delayed tasks are due: no claim ran
    bucket = d.sm.store.queue.by_type["email"]["acme"]
    delayed = list(bucket.delayed)
    assert head(d) == 1
    assert head(d, priorities=(2, 10)) == 3
    assert bucket.delayed == delayed          # a read moves nothing
    assert d.claim_one().task_id == "later1"


def test_prefetch_counts_a_not_yet_due_task_only_when_nothing_is_due() -> None:
    d = Driver()
    d.add("soon2", priority=2, run_at_ms=T0 + 1_000)
    assert head(d) is None
    assert head(d, prefetch_ms=999) is None
    assert head(d, prefetch_ms=1_000) == 2
    assert head(d, prefetch_ms=1_000, priorities=(3, 10)) is None
    d.add("now8", priority=8)
    assert head(d, prefetch_ms=1_000) == 8    # a claim takes the due task first


def test_head_is_what_the_next_claim_takes() -> None:
    """Random queues: the head is the effective priority of the task a one-task claim of
    the same kind takes next, at every step, for ranges, tenants and delays."""
    rng = random.Random(11)
    d = Driver()
    tenants = ("acme", "beta", "gamma")
    for n in range(400):
        d.add(f"t{n}", tenant=rng.choice(tenants), priority=rng.randrange(11),
              task_type=rng.choice(("email", "sms")),
              run_at_ms=T0 + rng.randrange(-6 * AGING, 2 * AGING))
    for step in range(300):
        d.now += rng.randrange(0, AGING // 20)
        lo = rng.randrange(11)
        prio = (lo, rng.randrange(lo, 11)) if step % 3 else (0, 10)
        tenant = rng.choice((None, None) + tenants)
        types = rng.choice((EMAIL, ("sms",), ("email", "sms")))
        expected = head(d, types=types, tenant=tenant, priorities=prio)
        taken = d.claim(task_types=types, tenant=tenant, max_tasks=1, worker_id="w",
                        priority_min=prio[0], priority_max=prio[1])
        assert (eff(taken[0], d.now) if taken else None) == expected, step
