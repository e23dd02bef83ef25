"""Replica._restore_frozen: a restored state leaves the cyclic GC's scans, and a state
installed over it lets the old one be collected."""
from __future__ import annotations

import gc
import weakref

import pytest

from tsched.node.raft.replica import Replica
from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c


@pytest.fixture
def unfrozen():
    yield
    gc.unfreeze()   # leave the test process as it was


def _blob() -> bytes:
    sm = StateMachine()
    sm.apply_batch([c.SubmitTask(request_id=f"r{i}", now_ms=1_000, task_id=f"t{i}",
                                 tenant="a", task_type="x") for i in range(50)])
    return sm.snapshot()


class _Probe:
    """Held in a cycle with a state (a compiled StateMachine takes no weak reference)."""


def _probe(sm: StateMachine) -> weakref.ref:
    probe = _Probe()
    probe.sm = sm
    sm.tasks["~probe"] = probe   # type: ignore[assignment]
    return weakref.ref(probe)


def test_restored_state_is_frozen_and_a_replaced_one_is_collected(tmp_path, unfrozen):
    replica = Replica(self_id="a", self_raft="127.0.0.1:1", peers={}, data_dir=tmp_path)
    enabled = gc.isenabled()
    first = replica._restore_frozen(_blob())
    assert gc.isenabled() == enabled
    assert gc.get_freeze_count() > len(first.tasks)
    frozen_task = next(iter(first.tasks.values()))
    assert not any(frozen_task is o for o in gc.get_objects())   # no generation holds it
    replica._sm = first
    old = _probe(first)
    del first, frozen_task
    second = replica._restore_frozen(_blob())
    assert replica._sm is second            # swapped in before the old one was collected
    assert old() is None                    # the old state's cycles were collected
    assert gc.get_freeze_count() > len(second.tasks)


def test_compaction_thresholds_are_staggered_across_the_cluster(tmp_path):
    from tsched.node.raft.options import RaftOptions
    addrs = {"a": "127.0.0.1:1", "b": "127.0.0.1:2", "c": "127.0.0.1:3"}
    got = [Replica(self_id=i, self_raft=addrs[i], peers={p: a for p, a in addrs.items()
                                                        if p != i}, data_dir=tmp_path,
                   options=RaftOptions(compaction_min_bytes=6_000)).compaction_bytes
           for i in sorted(addrs)]
    assert got == [6_000, 5_000, 4_000]     # distinct, none above the configured bound
    alone = Replica(self_id="a", self_raft="127.0.0.1:1", peers={}, data_dir=tmp_path)
    assert alone.compaction_bytes == alone.options.compaction_min_bytes


def test_compaction_by_age_is_staggered_across_the_cluster(tmp_path):
    """The age bound starts a new period at a different second on each replica."""
    from tsched.node.raft.options import RaftOptions
    addrs = {"a": "127.0.0.1:1", "b": "127.0.0.1:2", "c": "127.0.0.1:3"}
    opts = RaftOptions(compaction_min_time_s=600.0)
    due = {}
    for i in sorted(addrs):
        r = Replica(self_id=i, self_raft=addrs[i], data_dir=tmp_path, options=opts,
                    peers={p: a for p, a in addrs.items() if p != i})
        due[i] = [t for t in range(1, 1201)
                  if r._compaction.period_of(t, 600.0) > r._compaction.period_of(t - 1, 600.0)]
    assert due == {"a": [600, 1200], "b": [500, 1100], "c": [400, 1000]}


def test_compaction_waits_for_a_log_as_large_as_the_last_snapshot(tmp_path):
    """A snapshot writes the whole state: with a large state, the log may grow to the last
    snapshot's size before the next one, so the snapshot work per byte of log stays flat."""
    from tsched.node.raft.options import RaftOptions
    replica = Replica(self_id="a", self_raft="127.0.0.1:1", peers={}, data_dir=tmp_path,
                      options=RaftOptions(compaction_min_bytes=6_000))
    assert replica.compaction_bytes == 6_000                 # no snapshot yet: the floor
    replica.snapshot_path.write_bytes(b"\0" * 50_000)       # found at start
    fresh = Replica(self_id="a", self_raft="127.0.0.1:1", peers={}, data_dir=tmp_path,
                    options=RaftOptions(compaction_min_bytes=6_000))
    assert fresh.compaction_bytes == 50_000
    small = Replica(self_id="a", self_raft="127.0.0.1:1", peers={}, data_dir=tmp_path,
                    options=RaftOptions(compaction_min_bytes=80_000))
    assert small.compaction_bytes == 80_000                  # never below the floor
