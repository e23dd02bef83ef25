"""SeqIndex (blocks of seq-sorted lists) against a plain sorted reference, and the claim
queue's bulk load against one push per task."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tsched.statemachine.listing import SeqIndex
from tsched.statemachine.rules import static_key
from tsched.statemachine.model import Task
from tsched.statemachine.queue import ClaimQueue
from tsched.statemachine.commands import RetryPolicy


def _task(seq: int, tenant: str = "a", task_type: str = "x", priority: int = 5,
          run_at_ms: int = 1_000) -> Task:
    return Task(f"t{seq}", tenant, task_type, "null", priority, run_at_ms, 3, RetryPolicy(),
                60_000, None, None, 0, seq)


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
