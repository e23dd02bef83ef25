"""`ready_by_type` (the `tsched_ready_tasks` gauge, DESIGN 14.4): pending tasks per type
that are due (to the second) and not held by a keyed limit, against a brute-force count
over random histories, and after a restore."""
from __future__ import annotations

import random

import pytest
from sm_support import T0, Driver

from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c

TYPES = ("email", "sms")


def brute(sm: StateMachine, now_ms: int) -> dict[str, int]:
    held = sm.store.limiter.held_of
    out: dict[str, int] = {}
    for t in sm.tasks.values():
        if t.state == "pending" and t.run_at_ms // 1000 <= now_ms // 1000 \
                and t.task_id not in held:
            out[t.task_type] = out.get(t.task_type, 0) + 1
    return out


def _step(d: Driver, rnd: random.Random) -> None:
    op = rnd.randrange(8)
    if op <= 2:
        d.add(task_type=rnd.choice(TYPES), run_at_ms=d.now + rnd.choice((0, 0, 700, 3_000)),
              limits=("one",) if rnd.random() < 0.3 else (),
              retry=c.RetryPolicy(backoff="fixed", base_ms=1_500, max_ms=1_500))
    elif op == 3:
        d.claim(task_types=TYPES, max_tasks=rnd.randrange(1, 4),
                prefetch_ms=rnd.choice((0, 1_000)))
    elif op <= 5:
        running = [t for t in d.sm.tasks.values() if t.state == "running"]
        if running:
            t = rnd.choice(running)
            cmd = rnd.choice((c.Complete, c.Fail, c.Release))
            d.ok(cmd, task_id=t.task_id, fencing_token=t.fencing_token)
    elif op == 6:
        live = [t for t in d.sm.tasks.values() if t.state in ("pending", "running")]
        if live:
            d.ok(c.Cancel, task_id=rnd.choice(live).task_id)
    else:
        d.advance(rnd.choice((300, 1_000, 2_500)))


@pytest.mark.parametrize("seed", range(6))
def test_ready_counts_match_a_brute_force_count(seed: int) -> None:
    rnd = random.Random(seed)
    d = Driver()
    d.ok(c.PutLimit, name="one", concurrency=1)
    reader = 0   # a reader's clock: ahead of the state's at times, never back
    for i in range(300):
        _step(d, rnd)
        if i % 7 == 0:
            reader = max(reader, d.now + rnd.choice((0, 0, 400, 1_200)))
            assert d.sm.ready_by_type(reader) == brute(d.sm, max(reader, d.now))
    twin = StateMachine.restore(d.sm.snapshot())
    now = max(reader, d.now) + 5_000
    assert d.sm.ready_by_type(now) == brute(d.sm, now)
    # a restore holds nothing until claims meet the limited tasks again (DESIGN 15)
    assert twin.ready_by_type(now) == brute(twin, now)


def test_future_tasks_are_not_ready_until_their_second() -> None:
    d = Driver()
    d.add(task_type="email")
    d.add(task_type="email", run_at_ms=T0 + 10_500)
    assert d.sm.ready_by_type(T0) == {"email": 1}
    assert d.sm.ready_by_type(T0 + 9_999) == {"email": 1}
    assert d.sm.ready_by_type(T0 + 10_000) == {"email": 2}   # counted from its second


def test_a_type_paused_as_a_whole_has_no_ready_task_and_a_tenants_pause_still_counts() -> None:
    d = Driver()
    for tenant in ("acme", "initech"):
        d.add(task_type="email", tenant=tenant)
        d.add(task_type="sms", tenant=tenant)
    d.ok(c.PauseQueue, task_type="email", actor="admin")
    d.ok(c.PauseQueue, tenant="acme", actor="admin")
    # sms of the paused tenant still counts: the counts are per type (DESIGN 14.4)
    assert d.sm.ready_by_type(T0) == {"sms": 2}
    d.ok(c.ResumeQueue, task_type="email", actor="admin")
    assert d.sm.ready_by_type(T0) == {"email": 2, "sms": 2}
