"""Keyed limits (issue 46): the real StateMachine against a brute-force reference.

The reference keeps every task in a list and, for each claim, walks all pending due tasks in
claim order and grants each one whose every limit has budget now (concurrency: running
slots of its partition; rate: starts in the window (now - per, now]; a pause). So the
machine's claims must honour every limit and skip nothing eligible, whatever it holds, and
whatever its held-task index looks like after a snapshot and restore (a rule restores the
machine from its own snapshot mid-history).

One tenant, so the claim order is (static key, run_at, seq); leases are long and the clock
moves by seconds, so no lease expires and no task ages.
"""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import commands as c
from tests.property.budget import examples

T0 = 1_700_000_000_000
AGING_MS = Limits().aging_interval_ms
RETRY = c.RetryPolicy(backoff="fixed", base_ms=1_000, max_ms=1_000, jitter_permille=0)
TYPES = ("x", "y")
NAMES = ("L1", "L2", "L3")
LEASE_MS = 3_600_000


class Ref:
    def __init__(self, task_id, task_type, priority, run_at, limits, k, seq):
        self.id, self.type, self.priority, self.run_at = task_id, task_type, priority, run_at
        self.limits, self.k, self.seq = limits, k, seq
        self.state, self.token = "pending", 0


class Budget:
    def __init__(self, rate, per_ms, concurrency, partition_by):
        self.rate, self.per_ms, self.concurrency = rate, per_ms, concurrency
        self.partition_by = partition_by
        self.running: dict[str, list[str]] = {}
        self.starts: dict[str, list[int]] = {}
        self.paused: dict[str, int] = {}

    def key(self, task: Ref) -> str:
        if self.partition_by is None:
            return ""
        if self.partition_by == "tenant":
            return "a"
        return "" if task.k is None else str(task.k)

    def allows(self, key: str, now: int) -> bool:
        if self.paused.get(key, 0) > now:
            return False
        if self.concurrency and len(self.running.get(key, [])) >= self.concurrency:
            return False
        recent = [s for s in self.starts.get(key, []) if s > now - self.per_ms]
        return not (self.rate and len(recent) >= self.rate)


class LimitsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sm = StateMachine(Limits(request_window_ms=366 * 86_400_000))
        self.now = T0
        self.n = 0
        self.tasks: list[Ref] = []
        self.budgets: dict[str, Budget] = {}
        self.token = 0
        self.lowered: dict[str, None] = {}   # limits lowered below their use: no invariant

    def _apply(self, cls, **fields):
        self.n += 1
        return self.sm.apply(cls(request_id=f"r{self.n}", now_ms=self.now, **fields))

    def _put(self, name, rate, per_ms, concurrency, partition_by) -> None:
        r = self._apply(c.PutLimit, name=name, rate=rate, per_ms=per_ms,
                        concurrency=concurrency, partition_by=partition_by)
        assert r.ok, r
        old = self.budgets.get(name)
        new = Budget(rate, per_ms, concurrency, partition_by)
        if old is not None:
            new.running, new.starts, new.paused = old.running, old.starts, old.paused
        self.budgets[name] = new

    @initialize(specs=st.lists(st.tuples(st.integers(0, 3), st.sampled_from([700, 2_500]),
                                         st.integers(0, 3),
                                         st.sampled_from([None, "tenant", "k"])),
                               min_size=3, max_size=3))
    def declare(self, specs) -> None:
        for name, (rate, per_ms, conc, by) in zip(NAMES, specs):
            if rate or conc:
                self._put(name, rate, per_ms, conc, by)

    # --- rules --------------------------------------------------------------------------
    # mostly one type: a partition's held tasks then sit in one heap, and a release of
    # exactly its budget is common (with two heaps, each releases its budget: more slack)
    @rule(task_type=st.sampled_from(("x", "x", "x", "y")), priority=st.integers(0, 3),
          delay=st.sampled_from([0, 0, 0, 500, 2_000]),
          names=st.lists(st.sampled_from(NAMES), unique=True, max_size=2),
          k=st.sampled_from([None, 0, 1, 2]))
    def submit(self, task_type, priority, delay, names, k) -> None:
        names = [n for n in names if n in self.budgets]
        task_id = f"t{len(self.tasks)}"
        payload = json.dumps({} if k is None else {"k": k})
        r = self._apply(c.SubmitTask, task_id=task_id, tenant="a", task_type=task_type,
                        payload_json=payload, priority=priority, run_at_ms=self.now + delay,
                        max_retries=100, retry=RETRY, limits=tuple(names))
        assert r.ok, r
        self.tasks.append(Ref(task_id, task_type, priority, self.now + delay, names, k,
                              len(self.tasks)))

    @rule(types=st.lists(st.sampled_from(TYPES), min_size=1, unique=True),
          max_tasks=st.integers(1, 4), later_ms=st.sampled_from([0, 0, 350, 700, 2_500]))
    def claim(self, types, max_tasks, later_ms) -> None:
        """A claim, often after a while with no other command (no tick): budgets that
        freed by time alone must be found by the claim itself."""
        self.now += later_ms
        expected = self._expected(types, max_tasks)
        r = self._apply(c.Claim, worker_id="w", task_types=tuple(types), max_tasks=max_tasks,
                        lease_ms=LEASE_MS)
        assert r.ok, r
        got = [t.task_id for t in r.value["tasks"]]
        assert got == [t.id for t in expected], (got, [t.id for t in expected])
        for ref, task in zip(expected, r.value["tasks"]):
            ref.state, ref.token = "running", task.fencing_token

    def _expected(self, types, max_tasks) -> list[Ref]:
        due = sorted((t for t in self.tasks if t.state == "pending" and t.type in types
                      and t.run_at <= self.now),
                     key=lambda t: (t.priority * AGING_MS + t.run_at, t.run_at, t.seq))
        out = []
        for t in due:
            if len(out) == max_tasks:
                break
            bound = [(self.budgets[n], self.budgets[n].key(t)) for n in t.limits
                     if n in self.budgets]
            if all(b.allows(key, self.now) for b, key in bound):
                for b, key in bound:
                    if b.concurrency:
                        b.running.setdefault(key, []).append(t.id)
                    if b.rate:
                        b.starts.setdefault(key, []).append(self.now)
                out.append(t)
        return out

    def _running(self, pick: int) -> Ref | None:
        running = [t for t in self.tasks if t.state == "running"]
        return running[pick % len(running)] if running else None

    def _ended(self, t: Ref) -> None:
        for n in t.limits:
            b = self.budgets.get(n)
            if b is not None and t.id in b.running.get(b.key(t), []):
                b.running[b.key(t)].remove(t.id)

    @rule(pick=st.integers(0, 50), how=st.sampled_from(["complete", "fail", "release"]))
    def end(self, pick, how) -> None:
        t = self._running(pick)
        if t is None:
            return
        cls = {"complete": c.Complete, "fail": c.Fail, "release": c.Release}[how]
        r = self._apply(cls, task_id=t.id, fencing_token=t.token)
        assert r.ok, r
        self._ended(t)
        t.state = "completed" if how == "complete" else "pending"
        if how == "fail":
            t.run_at = self.now + RETRY.base_ms

    @rule(pick=st.integers(0, 50), after_ms=st.sampled_from([300, 1_000, 3_000]))
    def rate_limited(self, pick, after_ms) -> None:
        t = self._running(pick)
        names = [n for n in t.limits if n in self.budgets] if t is not None else []
        if not names:
            return
        r = self._apply(c.PauseLimit, task_id=t.id, fencing_token=t.token, limit=names[0],
                        after_ms=after_ms)
        assert r.ok, r
        b = self.budgets[names[0]]
        key = b.key(t)
        b.paused[key] = max(b.paused.get(key, 0), self.now + after_ms)
        self._ended(t)
        t.state = "pending"
        assert self.sm.get_task(t.id).attempt == sum(
            a.outcome != "rate_limited" for a in self.sm.get_task(t.id).attempts)

    @rule(pick=st.integers(0, 50))
    def cancel_pending(self, pick) -> None:
        pending = [t for t in self.tasks if t.state == "pending"]
        if pending:
            t = pending[pick % len(pending)]
            assert self._apply(c.Cancel, task_id=t.id).ok
            t.state = "cancelled"

    @rule(name=st.sampled_from(NAMES), rate=st.integers(0, 3), conc=st.integers(0, 3))
    def change(self, name, rate, conc) -> None:
        b = self.budgets.get(name)
        if b is not None and (rate or conc):
            if (b.rate and (not rate or rate < b.rate)) or \
                    (b.concurrency and (not conc or conc < b.concurrency)):
                self.lowered[name] = None
            self._put(name, rate, b.per_ms, conc, b.partition_by)

    @precondition(lambda self: len(self.budgets) > 1)
    @rule(name=st.sampled_from(NAMES))
    def delete(self, name) -> None:
        if name in self.budgets:
            assert self._apply(c.DeleteLimit, name=name).ok
            del self.budgets[name]

    @rule(ms=st.sampled_from([1, 100, 400, 699, 700, 1_000, 2_500]), tick=st.booleans())
    def advance(self, ms, tick) -> None:
        self.now += ms
        if tick:
            assert self._apply(c.Tick).ok

    @rule()
    def restore(self) -> None:
        before = self.sm.state_digest()
        self.sm = StateMachine.restore(self.sm.snapshot(), self.sm.limits)
        assert self.sm.state_digest() == before

    # --- invariants ---------------------------------------------------------------------
    @invariant()
    def limits_hold(self) -> None:
        limiter = self.sm.store.limiter
        for name, parts in limiter.parts.items():
            if name in self.lowered:
                continue
            defn = limiter.defs[name]
            for part in parts.values():
                if defn.concurrency:
                    assert len(part.running) <= defn.concurrency, (name, part.key)
                starts = list(part.window)
                for i, s in enumerate(starts):   # no window of per_ms holds more than rate
                    inside = [x for x in starts[i:] if x < s + defn.per_ms]
                    assert not defn.rate or len(inside) <= defn.rate, (name, part.key)


    @invariant()
    def held_tasks_are_watched(self) -> None:
        """A task held by a budget that grows by time (a window, a pause) is never left
        without a wake at or before that instant: nothing else would release it."""
        limiter = self.sm.store.limiter
        for name, parts in limiter.parts.items():
            defn = limiter.defs[name]
            for part in parts.values():
                live = [e for heap in part.held.values() for e in heap
                        if e[-1].state == "pending" and e[-1].qver == e[-2]]
                grows = part.grows_at(defn, self.sm.now_ms)
                if live and grows is not None:
                    assert part.wake_at is not None and part.wake_at <= grows, (
                        name, part.key, part.wake_at, grows)


LimitsModel.TestCase.settings = settings(
    max_examples=examples(300), stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestKeyedLimits = LimitsModel.TestCase


# One rate limit, one task type, long histories: a partition held, released, spent again
# and released again, many times (a rule-based run is mostly short programs; this draws
# programs of 20 to 60 steps). The model's checks run after every step.
_STEP = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 1), st.sampled_from([0, 0, 500]),
              st.booleans()),
    st.tuples(st.just("claim"), st.integers(1, 4), st.sampled_from([0, 0, 350, 700, 2_500])),
    st.tuples(st.just("end"), st.integers(0, 50), st.sampled_from(["complete", "fail",
                                                                  "release"])),
    st.tuples(st.just("advance"), st.sampled_from([1, 100, 400, 699, 700, 1_000, 2_500]),
              st.booleans()),
    st.tuples(st.just("rate_limited"), st.integers(0, 50), st.sampled_from([300, 1_000])),
)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rate=st.integers(1, 3), conc=st.integers(0, 2),
       steps=st.lists(_STEP, min_size=20, max_size=60))
def test_long_histories_of_one_limit(rate, conc, steps) -> None:
    m = LimitsModel()
    m._put("L1", rate, 700, conc, None)
    for step in steps:
        kind, *args = step
        if kind == "submit":
            m.submit("x", args[0], args[1], ["L1"] if args[2] else [], None)
        elif kind == "claim":
            m.claim(["x"], args[0], args[1])
        else:
            getattr(m, kind)(*args)
        m.limits_hold()
        m.held_tasks_are_watched()
