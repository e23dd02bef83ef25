"""Snapshot format 4: tasks in chunks of rows with per-chunk tables, the digest's roll and
the state digest in the head, older formats still read."""
from __future__ import annotations

import msgpack
import pytest
from sm_support import COMPILED, INT_OBJECTS, T0, Driver

from tsched.statemachine import StateMachine, codec, snapshot_format
from tsched.statemachine import commands as c
from tsched.statemachine.codec import DecodeError
from tsched.statemachine.digest import full_hexdigest


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 7 rows, so a few hundred tasks span many chunks (and a short last one)."""
    monkeypatch.setattr(snapshot_format, "TASK_CHUNK", 7)


def _mixed(n: int = 400) -> Driver:
    """Tasks in every state, with attempts, idempotency keys, schedules, several tenants,
    types, retry policies and timeouts, and delayed ones."""
    d = Driver()
    d.ok(c.SetTenant, tenant="acme", max_running=0, weight=2)
    d.ok(c.PutSchedule, tenant="acme", schedule_id="s", cron="* * * * *",
         template=c.TaskTemplate(task_type="email"), next_fire_ms=T0 + 60_000)
    fast = c.RetryPolicy(backoff="fixed", base_ms=5, max_ms=5)
    for i in range(n):
        d.add(f"t{i}", tenant=("acme", "b", "c")[i % 3], task_type=("email", "sms")[i % 2],
              priority=i % 11, payload_json=f'{{"n":{i}}}',
              run_at_ms=T0 + (i % 5) * 1_000 if i % 4 else None,
              idempotency_key=f"k{i}" if i % 7 == 0 else None,
              timeout_ms=(300_000, 60_000)[i % 2], retry=fast if i % 3 == 0 else c.RetryPolicy(),
              max_retries=i % 3)
    d.now = T0 + 10_000
    running = d.claim(max_tasks=100, task_types=("email", "sms"))
    for k, task in enumerate(running[:60]):
        if k % 4 == 0:
            d.ok(c.Complete, task_id=task.task_id, fencing_token=task.fencing_token,
                 result_json='{"ok":true}')
        elif k % 4 == 1:
            d.ok(c.Fail, task_id=task.task_id, fencing_token=task.fencing_token, error="x",
                 retryable=k % 8 == 1)
        elif k % 4 == 2:
            d.ok(c.Cancel, task_id=task.task_id)
        else:
            d.ok(c.Heartbeat, task_id=task.task_id, fencing_token=task.fencing_token)
    d.now = T0 + 60_000
    d.ok(c.Fire, tenant="acme", schedule_id="s", fire_ms=T0 + 60_000,
         next_fire_ms=T0 + 120_000)
    return d


def test_round_trip_over_many_chunks_keeps_digest_bytes_and_reads(small_chunks) -> None:
    d = _mixed()
    blob = d.sm.snapshot()
    twin = StateMachine.restore(blob)
    assert twin.digest() == d.sm.digest()
    assert full_hexdigest(twin) == twin.state_digest() == d.sm.state_digest()
    assert twin.snapshot() == blob                      # byte-identical re-encoding
    for task in d.sm.tasks.values():                    # every replicated field, exactly
        assert codec.task_record(twin.tasks[task.task_id]) == codec.task_record(task)
    assert [t.task_id for t in twin.list_tasks(limit=1_000)[0]] == \
        [t.task_id for t in d.sm.list_tasks(limit=1_000)[0]]
    assert twin.stats() == d.sm.stats()
    assert twin.next_timer_ms() == d.sm.next_timer_ms()


def test_a_restored_twin_stays_in_step(small_chunks) -> None:
    d = _mixed()
    twin = Driver()
    twin.sm, twin.n, twin.now = StateMachine.restore(d.sm.snapshot()), d.n, d.now
    # The same commands on both: claims, completions, cancels, expiry, retention eviction.
    for drv in (d, twin):
        drv.now = T0 + 100_000
        for task in drv.claim(max_tasks=50, task_types=("email", "sms"))[:20]:
            drv.ok(c.Complete, task_id=task.task_id, fencing_token=task.fencing_token)
        drv.ok(c.Cancel, task_id="t3")
        drv.now = T0 + 10 ** 9                           # leases expire, retention evicts
        drv.ok(c.Tick)
        drv.add("fresh")
    assert twin.sm.state_digest() == d.sm.state_digest()
    assert twin.sm.digest() == d.sm.digest()


def test_shared_values_cost_one_object(small_chunks) -> None:
    twin = StateMachine.restore(_mixed(60).sm.snapshot())
    tasks = list(twin.tasks.values())
    assert len({id(t.tenant) for t in tasks}) == 3
    assert len({id(t.retry) for t in tasks}) == 2
    if COMPILED:
        return   # no int objects to share (sm_support.INT_OBJECTS)
    assert len({id(t.timeout_ms) for t in tasks}) == 2
    same = [t for t in tasks if t.run_at_ms == t.created_at_ms]
    assert same and all(t.run_at_ms is t.created_at_ms for t in same)


def _format_2(sm: StateMachine) -> bytes:
    """What the previous release wrote: one canonical record per task and per request."""
    head = {k: v for k, v in sm._head().items() if k != "roll"}
    packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    packer.pack(dict(head, v=2, task_count=len(sm.tasks), request_count=len(sm.requests)))
    for task in sorted(sm.tasks.values(), key=lambda t: t.seq):
        packer.pack(codec.task_record(task))
    for rid, rec in sm.requests.items():
        packer.pack(codec.request_record(rid, rec))
    return packer.bytes()


def test_a_format_2_snapshot_restores_to_the_same_state() -> None:
    d = _mixed(100)
    old = StateMachine.restore(_format_2(d.sm))
    assert old.state_digest() == d.sm.state_digest()
    assert StateMachine.restore(old.snapshot()).state_digest() == d.sm.state_digest()


def _parts(sm: StateMachine) -> list:
    """A snapshot of under one chunk: [head, chunk, request records, request times]."""
    unpacker = msgpack.Unpacker(raw=False, use_list=True)
    unpacker.feed(sm.snapshot())
    return [unpacker.unpack() for _ in range(4)]


def _packed(parts: list) -> bytes:
    return b"".join(msgpack.packb(p, use_bin_type=True) for p in parts)


def test_the_parts_repacked_restore() -> None:
    d = _mixed(20)
    assert StateMachine.restore(_packed(_parts(d.sm))).digest() == d.sm.digest()


@pytest.mark.parametrize("damage, match", [
    ("version", "unknown snapshot version 9"), ("no_roll", "roll"),
    ("short_row", "rows"), ("count", "task rows"), ("requests", "requests"),
    ("strings", "strings"), ("duplicate", "twice"), ("trailing", "trailing"),
    ("times_count", "times do not match"), ("times_order", "ascending"),
    ("no_times", "OutOfData")])
def test_a_bad_format_5_snapshot_is_a_decode_error(damage: str, match: str) -> None:
    head, chunk, records, times = parts = _parts(_mixed(20).sm)
    if damage == "version":
        head["v"] = 9
    elif damage == "no_roll":
        del head["roll"]
    elif damage == "short_row":
        chunk[2][0] = chunk[2][0][:-1]
    elif damage == "count":
        head["task_count"] += 1
    elif damage == "requests":
        parts[2] = records[:-1]
    elif damage == "strings":
        chunk[0][0] = 5
    elif damage == "duplicate":
        chunk[2][1][1] = chunk[2][0][1]
    elif damage == "times_count":
        times[-1][1] += 1
    elif damage == "times_order":
        parts[3] = times[::-1] if len(times) > 1 else [[times[0][0], 1]] * times[0][1]
    elif damage == "no_times":
        parts.pop()
    else:
        parts.append(0)
    with pytest.raises(DecodeError, match=match):
        StateMachine.restore(_packed(parts))


@INT_OBJECTS
def test_decoded_submits_share_their_timeout_objects() -> None:
    cmds = [c.SubmitTask(request_id=f"r{i}", now_ms=T0, task_id=f"t{i}", tenant="a",
                         task_type="x", timeout_ms=300_000 + i % 2) for i in range(6)]
    got = codec.decode_batch(codec.encode_batch(cmds))
    assert [g.timeout_ms for g in got] == [c_.timeout_ms for c_ in cmds]
    assert len({id(g.timeout_ms) for g in got}) == 2
    odd = codec.decode_batch(msgpack.packb([["SubmitTask", dict(
        request_id="r", now_ms=T0, task_id="t", tenant="a", task_type="x", timeout_ms=True)]]))
    assert odd[0].timeout_ms is True         # not merged with 1: validation still sees a bool
