"""SeqIndex (blocks of seq-sorted lists) against a plain sorted reference, the claim
queue's bulk load against one push per task, and task listings: the scan bound, the
indexes by task type and by schedule, the creation window."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from sm_support import T0, Driver

from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c

from tsched.statemachine.listing import SeqIndex
from tsched.statemachine.rules import static_key
from tsched.statemachine.model import Task
from tsched.statemachine.queue import ClaimQueue
from tsched.statemachine.commands import RetryPolicy


def _task(seq: int, tenant: str = "a", task_type: str = "x", priority: int = 5,
          run_at_ms: int = 1_000, created_at_ms: int = 0) -> Task:
    return Task(f"t{seq}", tenant, task_type, "null", priority, run_at_ms, 3, RetryPolicy(),
                60_000, None, None, created_at_ms, seq)


# seqs spread over a few 1,024-seq blocks, so blocks appear, fill and empty
_ops = st.lists(st.tuples(st.booleans(), st.integers(0, 4_000)), max_size=300)


@settings(max_examples=60, deadline=None)
@given(_ops, st.lists(st.integers(0, 4_100), max_size=5))
def test_seq_index_matches_a_sorted_list(ops, cursors) -> None:
    index, held, tasks = SeqIndex(), set(), {}
    for add, seq in ops:
        task = tasks.setdefault(seq, _task(seq))
        if add and seq not in held:
            index.add(task)
            held.add(seq)
        elif not add and seq in held:
            index.remove(task)
            held.discard(seq)
    expect = sorted(held)
    assert len(index) == len(expect)
    assert [t.seq for t in index.oldest_first()] == expect
    assert [t.seq for t in index.newest_first()] == expect[::-1]
    for before in cursors:
        assert [t.seq for t in index.newest_first(before)] == [s for s in expect[::-1]
                                                               if s < before]
    assert sorted(index.blocks) == index.block_ids          # no empty or stray blocks
    assert all(index.blocks.values())


def test_seq_index_add_in_order_and_out_of_order() -> None:
    index = SeqIndex()
    for seq in (5, 9, 2_000, 3):        # 3 is below the last block: a new first block
        index.add(_task(seq))
    assert [t.seq for t in index.oldest_first()] == [3, 5, 9, 2_000]


def test_remove_of_a_task_not_held_is_an_error() -> None:
    index = SeqIndex()
    index.add(_task(1))
    try:
        index.remove(_task(2))
    except KeyError:
        return
    raise AssertionError("removing an absent task must fail")


def test_bulk_push_makes_the_entries_one_ordered_push_each_would() -> None:
    now = 50_000
    tasks = [_task(i, tenant="ab"[i % 2], task_type="xy"[i % 3 % 2], priority=i % 11,
                   run_at_ms=now + (i % 7 - 3) * 10_000) for i in range(200)]
    twins = [_task(t.seq, t.tenant, t.task_type, t.priority, t.run_at_ms) for t in tasks]
    pushed, loaded = ClaimQueue(60_000), ClaimQueue(60_000)
    for t in tasks:
        pushed.push(t, now)
    loaded.bulk = True
    for t in twins:
        loaded.push(t, now)
    loaded.end_bulk()
    assert not loaded.bulk and not loaded.unsorted

    def entries(q):
        return {(tt, tn): (sorted(e[:-1] for e in b.ready), sorted(e[:-1] for e in b.delayed))
                for tt, buckets in q.by_type.items() for tn, b in buckets.items()}
    assert entries(loaded) == entries(pushed)
    for b in (b for buckets in pushed.by_type.values() for b in buckets.values()):
        for key, run_at, _, _, task in b.ready:  # push inlines rules.static_key
            assert key == static_key(task.priority, run_at, 60_000)
    for q in (pushed, loaded):                   # every heap is ordered: its top is least
        for buckets in q.by_type.values():
            for b in buckets.values():
                assert all(h[0] == min(h) for h in (b.ready, b.delayed) if h)
    assert all(a.qver == b.qver == 1 for a, b in zip(tasks, twins))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=300), st.integers(-1, 700))
def test_seq_created_before_finds_the_first_task_created_at_or_after(steps, at) -> None:
    """Creation times never decrease with seq (many tasks share a millisecond): the
    bisection gives the seq of the oldest task created at or after `at`."""
    index, created, tasks = SeqIndex(), 0, []
    for i, step in enumerate(steps):
        created += step
        tasks.append(_task(i * 7 + 1, created_at_ms=created))   # seqs spread over blocks
        index.add(tasks[-1])
    want = next((t.seq for t in tasks if t.created_at_ms >= at), None)
    assert index.seq_created_before(at) == want


def _pages(sm: StateMachine, **query) -> tuple[list[str], int]:
    got, cursor, pages = [], None, 0
    while True:
        page, cursor = sm.list_tasks(cursor=cursor, **query)
        got += [t.task_id for t in page]
        pages += 1
        if cursor is None:
            return got, pages


def test_a_page_examines_at_most_scan_max_tasks_and_says_where_to_go_on() -> None:
    d = Driver()
    for i in range(50):
        d.add(task_type="common", tenant="acme" if i % 10 else "globex")
    # globex's 5 tasks are walked (its index is the smallest); none is retrying
    page, cursor = d.sm.list_tasks(tenant="globex", state="retrying", limit=100, scan_max=3)
    assert page == [] and cursor == "21"          # stopped early, nothing found yet
    assert d.sm.list_tasks(tenant="globex", state="retrying", cursor=cursor,
                           scan_max=3) == ([], None)
    got, pages = _pages(d.sm, tenant="globex", state="pending", limit=2, scan_max=2)
    assert got == [f"t{i}" for i in (41, 31, 21, 11, 1)] and pages == 3
    assert d.sm.list_tasks(state="running", scan_max=1) == ([], None)   # an empty index
    got, pages = _pages(d.sm, task_type="common", tenant="globex", limit=100, scan_max=5)
    assert len(got) == 5 and pages == 1           # the tenant's index: 5 tasks, all match


def test_a_type_or_a_schedule_walks_its_own_index() -> None:
    """A rare type among many tasks answers at once: its index holds only its tasks."""
    d = Driver()
    for i in range(300):
        d.add(task_type="rare" if i in (5, 250) else "common")
    page, cursor = d.sm.list_tasks(task_type="rare", limit=10, scan_max=2)
    assert [t.task_id for t in page] == ["t251", "t6"] and cursor is None
    assert d.sm.list_tasks(task_type="unknown", scan_max=1) == ([], None)
    d.ok(c.PutSchedule, tenant="acme", schedule_id="s1", cron="* * * * *",
         template=c.TaskTemplate(task_type="common"), next_fire_ms=T0 + 60_000)
    d.now = T0 + 60_000
    fired = d.ok(c.Fire, tenant="acme", schedule_id="s1", fire_ms=d.now,
                 next_fire_ms=d.now + 60_000)["task"]
    page, cursor = d.sm.list_tasks(schedule_id="s1", scan_max=1)
    assert page == [fired] and cursor is None
    assert list(d.sm.store.by_schedule) == ["s1"]
    twin = StateMachine.restore(d.sm.snapshot())     # derived: rebuilt from the tasks
    assert [t.task_id for t in twin.list_tasks(schedule_id="s1", scan_max=1)[0]] == \
        [fired.task_id]
    assert {k: len(v) for k, v in twin.store.by_type.items()} == {"rare": 2, "common": 299}


def test_evicted_tasks_leave_the_type_and_schedule_listings() -> None:
    d = Driver()
    t = d.add(task_type="gone")
    d.ok(c.Cancel, task_id=t.task_id)
    d.tick(d.now + d.sm.limits.retention_ms + 1)
    assert t.task_id not in d.sm.tasks
    assert "gone" not in d.sm.store.by_type and d.sm.list_tasks(task_type="gone") == ([], None)


def test_the_creation_window_bounds_the_walk() -> None:
    """created_before starts the walk at its place (a bisection), created_after ends it:
    a window of old tasks costs its own tasks, not the newer ones."""
    d = Driver()
    for i in range(100):
        d.now = T0 + i * 1_000
        d.add(task_type="x")
    window = {"created_after_ms": T0 + 10_000, "created_before_ms": T0 + 13_000}
    page, cursor = d.sm.list_tasks(limit=100, scan_max=3, **window)
    assert [t.task_id for t in page] == ["t13", "t12", "t11"] and cursor is None
    page, cursor = d.sm.list_tasks(limit=100, scan_max=2, **window)
    assert [t.task_id for t in page] == ["t13", "t12"] and cursor is not None
    page, cursor = d.sm.list_tasks(limit=100, scan_max=2, cursor=cursor, **window)
    assert [t.task_id for t in page] == ["t11"] and cursor is None
    assert d.sm.list_tasks(created_after_ms=T0 + 200_000) == ([], None)
    assert d.sm.list_tasks(created_before_ms=T0) == ([], None)
    assert len(d.sm.list_tasks(created_before_ms=T0 + 500_000, limit=1_000)[0]) == 100


def test_finished_after_keeps_terminal_tasks_finished_since() -> None:
    d = Driver()
    early, late, live = d.add(), d.add(), d.add()
    d.ok(c.Cancel, task_id=early.task_id)
    d.now += 5_000
    d.ok(c.Cancel, task_id=late.task_id)
    page, _ = d.sm.list_tasks(finished_after_ms=d.now)
    assert page == [late]
    assert d.sm.list_tasks(finished_after_ms=T0)[0] == [late, early]
    assert live not in d.sm.list_tasks(finished_after_ms=0)[0]
