"""A running task's progress (DESIGN 9): carried by heartbeats, kept for the running
attempt only, in snapshots, the state digest and re-sharding; bounded."""
from __future__ import annotations

import pytest
from sm_support import T0, Driver

from tsched.statemachine import StateMachine, codec
from tsched.statemachine import commands as c
from tsched.statemachine import errors as e
from tsched.statemachine.reshard import reshard


def _running(d: Driver, task_id: str = "a"):
    d.add(task_id)
    return d.claim_one()


def test_a_heartbeat_sets_progress_and_the_latest_wins() -> None:
    d = Driver()
    t = _running(d)
    d.ok(c.Heartbeat, task_id="a", fencing_token=t.fencing_token, progress_permille=250,
         progress_message="a quarter")
    d.now += 1_000
    d.ok(c.Heartbeat, task_id="a", fencing_token=t.fencing_token, progress_permille=500,
         progress_message="half")
    assert d.sm.store.progress["a"] == (500, "half", d.now)
    d.ok(c.Heartbeat, task_id="a", fencing_token=t.fencing_token)   # none carried: kept
    assert d.sm.store.progress["a"][:2] == (500, "half")


@pytest.mark.parametrize("end", ["complete", "fail", "release", "expire"])
def test_progress_ends_with_the_attempt(end: str) -> None:
    d = Driver()
    t = _running(d)
    d.ok(c.Heartbeat, task_id="a", fencing_token=t.fencing_token, progress_permille=10)
    if end == "complete":
        d.ok(c.Complete, task_id="a", fencing_token=t.fencing_token)
    elif end == "fail":
        d.ok(c.Fail, task_id="a", fencing_token=t.fencing_token, error="x")
    elif end == "release":
        d.ok(c.Release, task_id="a", fencing_token=t.fencing_token)
    else:
        d.now += 31_000
        d.run(c.Tick)
    assert d.sm.store.progress == {}


@pytest.mark.parametrize("fields", [
    {"progress_permille": 1001}, {"progress_permille": -2}, {"progress_permille": 0.5},
    {"progress_permille": True}, {"progress_permille": 5, "progress_message": "x" * 201},
    {"progress_permille": 5, "progress_message": 7},
    {"progress_message": "a message without a fraction"},
])
def test_bad_progress_is_refused_and_changes_nothing(fields: dict) -> None:
    d = Driver()
    t = _running(d)
    lease = t.lease_expires_at_ms
    d.now += 1_000
    result = d.run(c.Heartbeat, task_id="a", fencing_token=t.fencing_token, **fields)
    assert result.code == e.INVALID_ARGUMENT, result
    assert d.sm.store.progress == {} and t.lease_expires_at_ms == lease


def test_codec_drops_no_progress_and_keeps_some() -> None:
    plain = c.Heartbeat(request_id="r", now_ms=T0, task_id="t", fencing_token=4)
    with_progress = c.Heartbeat(request_id="r", now_ms=T0, task_id="t", fencing_token=4,
                                progress_permille=500, progress_message="half")
    old = c.Heartbeat(request_id="r", now_ms=T0, task_id="t", fencing_token=4,
                      lease_ms=30_000, tenant=None)
    assert codec.encode_batch([plain]) == codec.encode_batch([old])   # an older node reads it
    assert codec.decode_batch(codec.encode_batch([with_progress]))[0] == with_progress


def test_snapshot_round_trip_and_digest() -> None:
    d = Driver()
    t = _running(d)
    no_progress = d.sm.snapshot()
    assert b"task_progress" not in no_progress       # optional: absent is none
    digest_before = d.sm.state_digest()
    d.ok(c.Heartbeat, task_id="a", fencing_token=t.fencing_token, progress_permille=500,
         progress_message="half")
    assert d.sm.state_digest() != digest_before
    blob = d.sm.snapshot()
    twin = StateMachine.restore(blob)
    assert twin.store.progress == d.sm.store.progress
    assert twin.state_digest() == d.sm.state_digest() and twin.snapshot() == blob
    assert StateMachine.restore(no_progress).store.progress == {}


def test_reshard_takes_progress_to_the_tasks_shard() -> None:
    d = Driver()
    d.add("a", tenant="t0")
    d.add("b", tenant="t1")
    for t in d.claim(max_tasks=2):
        d.ok(c.Heartbeat, task_id=t.task_id, fencing_token=t.fencing_token,
             progress_permille=100 if t.task_id == "a" else 900)
    blobs = reshard([d.sm.snapshot()], 2, lambda tenant: int(tenant[1]))
    shards = [StateMachine.restore(b) for b in blobs]
    assert [dict((k, v[0]) for k, v in s.store.progress.items()) for s in shards] == \
        [{"a": 100}, {"b": 900}]
