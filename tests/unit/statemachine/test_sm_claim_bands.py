"""The claim queue's selection (plain, by range, weighted; peeks) against a brute-force
reference that scans every pending task, on random histories: aging, tenants with caps and
weights, delayed tasks, early dispatch, cancels, retries, releases and a restore midway."""
from __future__ import annotations

import random
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sm_support import T0, Driver

from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c
from tsched.statemachine.model import PENDING, RUNNING

AGING = 600_000
TENANTS = ("t0", "t1", "t2")
TYPES = ("email", "sms")
TIERS = ((0, 0), (1, 3), (4, 6), (7, 9), (10, 10))


class Ref:
    """What a claim should take, computed from the pending tasks alone."""

    def __init__(self, sm: StateMachine, now: int, types, tenant) -> None:
        self.now = now
        self.tasks = [t for t in sm.store.tasks.values() if t.state == PENDING and
                      t.task_type in types and (tenant is None or t.tenant == tenant)]
        self.views = {name: [v.service, v.weight, v.running, v.max_running]
                      for name, v in sm.tenants.items()}

    def _free(self, name: str) -> bool:
        _, _, running, cap = self.views[name]
        return not 0 < cap <= running

    def _eff(self, t) -> tuple[int, tuple]:
        key = max(0, t.priority * AGING + t.run_at_ms)
        return max(0, -((self.now - key) // AGING)), (key, t.run_at_ms, t.seq)

    def due(self, lo: int, hi: int):
        """The next due task of the range in claim order, or None."""
        best: dict[str, tuple] = {}
        for t in self.tasks:
            if t.run_at_ms > self.now or not self._free(t.tenant):
                continue
            eff, key = self._eff(t)
            if lo <= eff <= hi and (t.tenant not in best or key < best[t.tenant][1]):
                best[t.tenant] = (eff, key, t)
        if not best:
            return None
        return min(best.values(), key=lambda b: (
            b[0], Fraction(self.views[b[2].tenant][0], self.views[b[2].tenant][1]), b[1]))[2]

    def early(self, horizon: int, lo: int, hi: int):
        cands = [t for t in self.tasks if self.now < t.run_at_ms <= horizon and
                 lo <= t.priority <= hi and self._free(t.tenant)]
        return min(cands, key=lambda t: (t.run_at_ms, t.seq), default=None)

    def take(self, t) -> str:
        self.tasks.remove(t)
        self.views[t.tenant][0] += 1
        self.views[t.tenant][2] += 1
        return t.task_id

    def claim(self, max_tasks: int, prefetch: int, lo: int, hi: int) -> list[str]:
        out: list[str] = []
        while len(out) < max_tasks and (t := self.due(lo, hi)) is not None:
            out.append(self.take(t))
        while len(out) < max_tasks and prefetch and (
                t := self.early(self.now + prefetch, lo, hi)) is not None:
            out.append(self.take(t))
        return out

    def weighted(self, max_tasks: int, prefetch: int, weights) -> list[str]:
        credit = [0] * len(weights)
        active = list(range(len(weights)))
        out: list[str] = []
        while len(out) < max_tasks:
            found = {k: self.due(weights[k][0], weights[k][1]) for k in active}
            active = [k for k in active if found[k] is not None]
            if not active:
                break
            total = sum(weights[k][2] for k in active)
            for k in active:
                credit[k] += weights[k][2]
            pick = max(active, key=lambda k: (credit[k], -k))
            credit[pick] -= total
            out.append(self.take(found[pick]))
        while len(out) < max_tasks and prefetch:
            cands = [t for lo, hi, _ in weights
                     if (t := self.early(self.now + prefetch, lo, hi)) is not None]
            if not cands:
                break
            out.append(self.take(min(cands, key=lambda t: (t.run_at_ms, t.seq))))
        return out

    def claimable(self, prefetch: int, lo: int, hi: int) -> bool:
        return self.due(lo, hi) is not None or (self.early(self.now + prefetch, lo, hi)
                                                is not None)


def _claim(d: Driver, rng: random.Random) -> None:
    types = rng.choice((("email",), ("sms",), TYPES, ("sms", "email")))
    tenant = rng.choice((None, None, None, "t1"))
    max_tasks, prefetch = rng.randrange(1, 9), rng.choice((0, 0, 1_000))
    ref = Ref(d.sm, d.now, types, tenant)
    kind = rng.randrange(3)
    if kind == 2:
        weights = tuple((lo, hi, rng.randrange(1, 20)) for lo, hi in TIERS
                        if rng.random() < 0.6) or ((7, 9, 1),)
        want = ref.weighted(max_tasks, prefetch, weights)
        fields: dict = {"tier_weights": weights}
    else:
        lo = rng.randrange(11) if kind else 0
        hi = rng.randrange(lo, 11) if kind else 10
        for _ in range(2):
            plo = rng.randrange(11)
            phi = rng.randrange(plo, 11)
            peek = d.sm.has_claimable(types, tenant, prefetch, d.now, (plo, phi))
            assert peek == ref.claimable(prefetch, plo, phi), (plo, phi)
        want = ref.claim(max_tasks, prefetch, lo, hi)
        fields = {"priority_min": lo, "priority_max": hi}
    got = d.claim(task_types=types, max_tasks=max_tasks, prefetch_ms=prefetch,
                  tenant=tenant, lease_ms=3_600_000, **fields)
    assert [t.task_id for t in got] == want, fields


def _step(d: Driver, rng: random.Random, n: int) -> None:
    roll = rng.random()
    tasks = d.sm.store.tasks
    if roll < 0.4:
        late = rng.random() < 0.2
        d.add(f"x{n}", priority=rng.randrange(11), tenant=rng.choice(TENANTS),
              task_type=rng.choice(TYPES),
              run_at_ms=d.now + rng.randrange(1, AGING // 2) if late
              else d.now - rng.randrange(0, 6 * AGING))
    elif roll < 0.65:
        _claim(d, rng)
    elif roll < 0.75:
        d.now += rng.randrange(0, AGING)
    else:
        pending = sorted(t for t, v in tasks.items() if v.state == PENDING)
        running = sorted(t for t, v in tasks.items() if v.state == RUNNING)
        if roll < 0.82 and pending:
            d.ok(c.Cancel, task_id=rng.choice(pending))
        elif running:
            task = tasks[rng.choice(running)]
            how = rng.randrange(3)
            if how == 0:
                d.ok(c.Complete, task_id=task.task_id, fencing_token=task.fencing_token)
            elif how == 1:
                d.ok(c.Release, task_id=task.task_id, fencing_token=task.fencing_token)
            else:
                d.ok(c.Fail, task_id=task.task_id, fencing_token=task.fencing_token,
                     retry_after_ms=rng.randrange(1, 60_000))


def _history(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    d = Driver(now_ms=T0 + 10 * AGING)
    d.ok(c.SetTenant, tenant="t1", max_running=rng.randrange(2, 30), weight=3)
    d.ok(c.SetTenant, tenant="t2", max_running=0, weight=rng.randrange(1, 4))
    for n in range(rng.randrange(20, 200)):
        d.add(f"s{n}", priority=rng.randrange(11), tenant=rng.choice(TENANTS),
              task_type=rng.choice(TYPES), run_at_ms=d.now - rng.randrange(0, 6 * AGING))
    for n in range(steps):
        if n == steps // 2:
            d.sm = StateMachine.restore(d.sm.snapshot())   # the queue rebuilt in bulk
        _step(d, rng, n)


def test_random_histories_match_the_reference() -> None:
    for seed in range(25):
        _history(seed, 300)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2 ** 32 - 1))
def test_any_history_matches_the_reference(seed: int) -> None:
    _history(seed, 120)


def test_a_backlog_of_more_urgent_static_priorities_is_not_walked() -> None:
    """A range claim of the low tier reads the bands that can hold it: the thousands of
    normal tasks ahead of it are not visited (counted through the live check)."""
    d = Driver()
    for n in range(3_000):
        d.add(f"n{n}", priority=4 + n % 3)
    for n in range(50):
        d.add(f"l{n}", priority=7 + n % 3)
    bucket = d.sm.store.queue.by_type["email"]["acme"]
    assert [len(b) for b in bucket.bands[4:10]] == [1000, 1000, 1000, 17, 17, 16]
    got = d.claim(max_tasks=5, priority_min=7, priority_max=9)
    assert [t.task_id for t in got] == ["l0", "l3", "l6", "l9", "l12"]
    assert [len(b) for b in bucket.bands[4:7]] == [1000, 1000, 1000]
    assert bucket.ready == sorted(b[0] for b in bucket.bands if b)
