"""Task listings page by page (DESIGN 7): a page examines at most `scan_max` tasks and
carries a cursor when it stops early; following the cursors yields every matching task
exactly once, newest first, even while tasks are submitted, claimed, finished, cancelled,
replayed and evicted between the pages. Checked against a plain scan of the tasks.

Also the listing indexes' invariant: by task type and by schedule hold exactly the tasks of
each key, and creation times never decrease with seq (the creation window's bisection and
early stop rely on it)."""
from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import commands as c
from tests.property.budget import examples

T0 = 1_700_000_000_000
TENANTS = ("a", "b")
TYPES = ("x", "y", "z")
STATES = ("pending", "running", "completed", "cancelled", "dead_letter", "retrying")
# evictions happen within a run: finished tasks are kept 5 s
LIMITS = Limits(retention_ms=5_000)
IMMUTABLE = ("tenant", "task_type", "created_after_ms", "created_before_ms")


def check_listing_indexes(sm: StateMachine) -> None:
    """by_type and by_schedule hold exactly each key's tasks, in seq order; creation times
    never decrease with seq."""
    store = sm.store
    for indexes, key in ((store.by_type, "task_type"), (store.by_schedule, "schedule_id")):
        want: dict[str, list[int]] = {}
        for t in store.all.oldest_first():
            if getattr(t, key) is not None:
                want.setdefault(getattr(t, key), []).append(t.seq)
        assert {k: [t.seq for t in ix.oldest_first()] for k, ix in indexes.items()} == want
        assert all(len(ix) == len(want[k]) for k, ix in indexes.items())
    created = [t.created_at_ms for t in store.all.oldest_first()]
    assert created == sorted(created)


def matches(sm: StateMachine, t, f: dict) -> bool:
    """The filter by a plain reading of DESIGN 7 (state `retrying`: a view of pending)."""
    state = f.get("state")
    if state == "retrying" and not (t.state == "pending" and t.failures > 0):
        return False
    if state not in (None, "retrying") and t.state != state:
        return False
    if f.get("tenant") not in (None, t.tenant) or f.get("task_type") not in (None, t.task_type):
        return False
    lo, hi, done = f.get("created_after_ms"), f.get("created_before_ms"), f.get("finished_after_ms")
    return ((lo is None or t.created_at_ms >= lo) and (hi is None or t.created_at_ms < hi)
            and (done is None or (t.completed_at_ms is not None and t.completed_at_ms >= done)))


class ListingPages(RuleBasedStateMachine):
    @initialize()
    def start(self):
        self.sm = StateMachine(LIMITS)
        self.now, self.n = T0, 0
        self.listing: dict | None = None

    def _apply(self, cls, **fields):
        self.n += 1
        return self.sm.apply(cls(request_id=f"r{self.n}", now_ms=self.now, **fields))

    @rule(tenant=st.sampled_from(TENANTS), task_type=st.sampled_from(TYPES),
          count=st.integers(1, 6))
    def submit(self, tenant, task_type, count):
        for _ in range(count):
            self.n += 1
            assert self._apply(c.SubmitTask, task_id=f"t{self.n}", tenant=tenant,
                               task_type=task_type, max_retries=1).ok

    @rule(ms=st.sampled_from([0, 1, 400, 2_000, 6_000]))
    def tick(self, ms):
        self.now += ms
        self._apply(c.Tick)

    @rule(task_type=st.sampled_from(TYPES), outcome=st.sampled_from(["complete", "fail", "none"]))
    def claim(self, task_type, outcome):
        got = self._apply(c.Claim, worker_id="w", task_types=(task_type,), max_tasks=3)
        for t in got.value["tasks"] if got.ok else ():
            if outcome == "complete":
                self._apply(c.Complete, task_id=t.task_id, fencing_token=t.fencing_token)
            elif outcome == "fail":
                self._apply(c.Fail, task_id=t.task_id, fencing_token=t.fencing_token,
                            error="e", retryable=True)

    @rule(data=st.data(), action=st.sampled_from([c.Cancel, c.Replay, c.Discard]))
    def manage(self, data, action):
        if self.sm.tasks:
            task_id = data.draw(st.sampled_from(sorted(self.sm.tasks)))
            self._apply(action, task_id=task_id)

    @precondition(lambda self: self.listing is None)
    @rule(state=st.sampled_from((None, None, None) + STATES),
          tenant=st.none() | st.sampled_from(TENANTS),
          task_type=st.none() | st.sampled_from(TYPES), window=st.integers(0, 3),
          finished=st.sampled_from((False, False, True)), scan_max=st.integers(1, 6), limit=st.integers(1, 4))
    def begin_listing(self, state, tenant, task_type, window, finished, scan_max, limit):
        f = {"state": state, "tenant": tenant, "task_type": task_type}
        if window & 1:
            f["created_after_ms"] = self.now - 3_000
        if window & 2:
            f["created_before_ms"] = self.now - 500
        if finished:
            f["finished_after_ms"] = self.now - 4_000
        # tasks that must be seen: matching now by what never changes, and still there at
        # the end with the same match
        at_start = {tid for tid, t in self.sm.tasks.items() if matches(self.sm, t, f)}
        self.listing = {"f": f, "scan_max": scan_max, "limit": limit, "cursor": None,
                        "seen": [], "at_start": at_start, "last_seq": None, "pages": 0}

    @precondition(lambda self: self.listing is not None)
    @rule()
    def next_page(self):
        ls = self.listing
        page, cursor = self.sm.list_tasks(cursor=ls["cursor"], limit=ls["limit"],
                                          scan_max=ls["scan_max"], **ls["f"])
        assert len(page) <= ls["limit"]
        ls["pages"] += 1
        for t in page:
            assert matches(self.sm, t, ls["f"]), (t, ls["f"])
            assert ls["last_seq"] is None or t.seq < ls["last_seq"], "newest first, no repeat"
            ls["last_seq"] = t.seq
            ls["seen"].append(t.task_id)
        if cursor is None:
            self._finish()
        else:
            ls["cursor"] = cursor

    def _finish(self):
        ls, self.listing = self.listing, None
        seen = ls["seen"]
        assert len(seen) == len(set(seen)), "a task was listed twice"
        f = ls["f"]
        stable = all(k in IMMUTABLE or f.get(k) is None for k in f)
        if stable:   # what matched at the start and is still there was seen
            kept = {tid for tid in ls["at_start"] if tid in self.sm.tasks}
            assert kept <= set(seen), (kept - set(seen), f)
        # (with a state or finish filter a task may move in or out between pages: each one
        # listed matched when its page was made, checked in next_page)

    @invariant()
    def indexes_agree(self):
        if hasattr(self, "sm"):
            check_listing_indexes(self.sm)

    def teardown(self):
        # an unfinished listing is followed to its end with nothing in between
        while getattr(self, "listing", None) is not None:
            self.next_page()


def test_a_whole_listing_without_writes_is_the_plain_scan() -> None:
    """With nothing applied between the pages, the pages joined are exactly the plain
    scan's answer, newest first, for every filter and bound."""
    sm = StateMachine(LIMITS)
    now = T0
    for i in range(60):
        cmd = c.SubmitTask(request_id=f"s{i}", now_ms=now + i * 100, task_id=f"t{i}",
                           tenant=TENANTS[i % 2], task_type=TYPES[i % 3])
        assert sm.apply(cmd).ok
    for i in range(0, 60, 7):
        assert sm.apply(c.Cancel(request_id=f"c{i}", now_ms=now + 7_000, task_id=f"t{i}")).ok
    for f in ({}, {"task_type": "y"}, {"tenant": "a", "task_type": "z"},
              {"state": "cancelled", "tenant": "b"}, {"created_after_ms": now + 1_000},
              {"created_before_ms": now + 2_050, "task_type": "x"},
              {"created_after_ms": now + 500, "created_before_ms": now + 500},
              {"finished_after_ms": now}):
        want = [t.task_id for t in sorted(sm.tasks.values(), key=lambda t: -t.seq)
                if matches(sm, t, f)]
        for scan_max in (1, 3, 1_000):
            got, cursor, pages = [], None, 0
            while True:
                page, cursor = sm.list_tasks(cursor=cursor, limit=4, scan_max=scan_max, **f)
                got += [t.task_id for t in page]
                pages += 1
                if cursor is None:
                    break
            assert got == want, (f, scan_max)
            assert pages <= len(sm.tasks) // scan_max + len(want) + 1


ListingPages.TestCase.settings = settings(
    max_examples=examples(120), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_listing_pages = ListingPages.TestCase
