"""Codec: command batches round-trip, junk is refused; snapshots restore the same state."""
from __future__ import annotations

import dataclasses

import msgpack
import pytest
from sm_support import T0, Driver

from tsched.statemachine import StateMachine, codec
from tsched.statemachine import commands as c
from tsched.statemachine.codec import DecodeError

EXAMPLES = [
    c.SubmitTask(request_id="r1", now_ms=T0, task_id="t", tenant="a", task_type="x",
                 payload_json='{"k":[1,2]}', priority=0, run_at_ms=T0 + 5, timeout_ms=2_000,
                 max_retries=7, retry=c.RetryPolicy(backoff="linear", base_ms=5, max_ms=9,
                                                    multiplier_milli=1_500, jitter_permille=3),
                 idempotency_key="k"),
    c.Claim(request_id="r2", now_ms=T0, worker_id="w", task_types=("x", "y"), max_tasks=3,
            lease_ms=5_000, prefetch_ms=200, tenant="a"),
    c.Heartbeat(request_id="r3", now_ms=T0, task_id="t", fencing_token=4, lease_ms=2_000),
    c.Complete(request_id="r4", now_ms=T0, task_id="t", fencing_token=4, result_json="1"),
    c.Fail(request_id="r5", now_ms=T0, task_id="t", fencing_token=4, error="e", retryable=False),
    c.Release(request_id="r6", now_ms=T0, task_id="t", fencing_token=4),
    c.Cancel(request_id="r7", now_ms=T0, task_id="t", tenant="a"),
    c.Replay(request_id="r8", now_ms=T0, task_id="t"),
    c.Discard(request_id="r9", now_ms=T0, task_id="t"),
    c.SetTenant(request_id="r10", now_ms=T0, tenant="a", max_running=3, weight=2),
    c.PutSchedule(request_id="r11", now_ms=T0, tenant="a", schedule_id="s", cron="@daily",
                  timezone="Europe/Paris", template=c.TaskTemplate(
                      task_type="x", retry=c.RetryPolicy(backoff="fixed")),
                  overlap="skip", misfire="run_once", catchup_window_ms=5, paused=True,
                  start_at_ms=1, end_at_ms=2, jitter_ms=3, next_fire_ms=4),
    c.DeleteSchedule(request_id="r12", now_ms=T0, tenant="a", schedule_id="s"),
    c.PauseSchedule(request_id="r13", now_ms=T0, tenant="a", schedule_id="s"),
    c.ResumeSchedule(request_id="r14", now_ms=T0, tenant="a", schedule_id="s", next_fire_ms=9),
    c.Fire(request_id="r15", now_ms=T0, tenant="a", schedule_id="s", fire_ms=1, next_fire_ms=2,
           manual=True),
    c.Fire(request_id="r18", now_ms=T0, tenant="a", schedule_id="s", fire_ms=1, next_fire_ms=2,
           shard=3),
    c.Tick(request_id="r16", now_ms=T0),
    c.Barrier(request_id="r17", now_ms=T0),
    c.AuditNote(request_id="r18", now_ms=T0, actor="admin",
                action="cluster.transfer_leadership", target="n1", change_json="{}"),
    c.Cancel(request_id="r19", now_ms=T0, task_id="t", tenant="a", actor="tenant:a"),
    c.SubmitTask(request_id="r19", now_ms=T0, task_id="t9", tenant="a", task_type="x",
                 limits=("partner", "bank")),
    c.PutLimit(request_id="r20", now_ms=T0, name="partner", rate=50, per_ms=1_000,
               concurrency=10, partition_by="account_id", actor="admin"),
    c.DeleteLimit(request_id="r21", now_ms=T0, name="partner"),
    c.PauseLimit(request_id="r22", now_ms=T0, task_id="t", fencing_token=3, limit="partner",
                 after_ms=30_000),
    c.SubmitWorkflow(request_id="r23", now_ms=T0, workflow_id="w", tenant="a",
                     templates=(("x", 5, 60_000, 3, ("fixed", 1, 2, 1_000, 0)),),
                     steps=(("s1", "t1", 0, "null", (), "cancel"),
                            ("s2", "t2", 0, "{}", (0,), "run")), idempotency_key="k"),
    c.CancelWorkflow(request_id="r24", now_ms=T0, workflow_id="w", tenant="a", actor="x"),
    c.PauseQueue(request_id="r25", now_ms=T0, task_type="x", reason="bank down", actor="x"),
    c.ResumeQueue(request_id="r26", now_ms=T0, tenant="a", actor="x"),
    c.OpenSession(request_id="r27", now_ms=T0, worker_id="w/low", timeout_ms=3_000, tenant="a"),
    c.EndSession(request_id="r28", now_ms=T0, worker_id="w/low", expired=True),
]


def test_every_command_type_round_trips() -> None:
    assert {type(cmd) for cmd in EXAMPLES} == set(c.COMMAND_TYPES)
    assert codec.decode_batch(codec.encode_batch(EXAMPLES)) == EXAMPLES


@pytest.mark.parametrize("blob", [
    b"", b"\xc1", b"junk", msgpack.packb({"a": 1}), msgpack.packb([["Nope", {}]]),
    msgpack.packb([["Tick", {"request_id": "r"}]]),                       # missing now_ms
    msgpack.packb([["Tick", {"request_id": "r", "now_ms": 1, "x": 2}]]),   # unknown field
    msgpack.packb([["SubmitTask", {"request_id": "r", "now_ms": 1, "task_id": "t",
                                   "tenant": "a", "task_type": "x", "retry": 5}]]),
    msgpack.packb([["SubmitTask", {"request_id": "r", "now_ms": 1, "task_id": "t",
                                   "tenant": "a", "task_type": "x",
                                   "retry": {"speed": 1}}]]),
    msgpack.packb([["PutSchedule", {"request_id": "r", "now_ms": 1, "tenant": "a",
                                    "schedule_id": "s", "cron": "x", "template": {}}]]),
    msgpack.packb([[1, {}]]), msgpack.packb([["Tick"]]), msgpack.packb([{1: 2}]),
    msgpack.packb([["Tick", {"request_id": "r", "now_ms": 1}]] * 10_001),
])
def test_junk_is_a_decode_error(blob: bytes) -> None:
    with pytest.raises(DecodeError):
        codec.decode_batch(blob)


def test_wrongly_typed_values_decode_and_are_rejected_at_apply() -> None:
    blob = msgpack.packb([["SubmitTask", {"request_id": "r", "now_ms": 1, "task_id": 7,
                                          "tenant": ["a"], "task_type": None}],
                          ["Claim", {"request_id": "q", "now_ms": 1, "worker_id": "w",
                                     "task_types": "x"}]])
    results = StateMachine().apply_batch(codec.decode_batch(blob))
    assert [r.code for r in results] == ["invalid_argument", "invalid_argument"]


def _busy_driver() -> Driver:
    d = Driver()
    d.ok(c.SetTenant, tenant="acme", max_running=5, weight=3)
    for i in range(30):
        d.add(f"t{i}", priority=i % 11, run_at_ms=T0 + (i % 4) * 1_000,
              idempotency_key=f"k{i}" if i % 3 == 0 else None, tenant="acme" if i % 2 else "b")
    d.ok(c.PutSchedule, tenant="acme", schedule_id="s", cron="* * * * *",
         template=c.TaskTemplate(task_type="email"), next_fire_ms=T0 + 60_000)
    d.now = T0 + 2_000
    running = d.claim(max_tasks=8)
    d.ok(c.Complete, task_id=running[0].task_id, fencing_token=running[0].fencing_token)
    d.ok(c.Fail, task_id=running[1].task_id, fencing_token=running[1].fencing_token,
         error="x", retryable=False)
    d.ok(c.Heartbeat, task_id=running[2].task_id, fencing_token=running[2].fencing_token)
    d.ok(c.Cancel, task_id=running[3].task_id)
    d.ok(c.Discard, task_id=running[1].task_id)
    d.now = T0 + 60_000
    d.ok(c.Fire, tenant="acme", schedule_id="s", fire_ms=T0 + 60_000,
         next_fire_ms=T0 + 120_000)
    d.sm.apply_batch([c.Barrier(request_id="b", now_ms=d.now)])
    return d


def _reads(sm: StateMachine) -> list:
    def task_view(t):
        return (t.task_id, t.tenant, t.task_type, t.payload_json, t.priority, t.run_at_ms,
                t.state, t.attempt, t.max_retries, t.retry, t.timeout_ms, t.idempotency_key,
                t.execution_id, t.schedule_id, t.lease_expires_at_ms, t.fencing_token,
                t.worker_id, t.cancel_requested, t.last_error, t.result_json, t.created_at_ms,
                t.started_at_ms, t.completed_at_ms, t.seq,
                [(a.attempt, a.worker_id, a.fencing_token, a.started_at_ms, a.ended_at_ms,
                  a.outcome, a.error) for a in t.attempts])
    tasks, _ = sm.list_tasks(limit=1_000)
    sched = sm.get_schedule("acme", "s")
    return [sm.seq, sm.now_ms, [task_view(t) for t in tasks],
            [task_view(t) for t in sm.list_tasks(state="pending", limit=1_000)[0]],
            [(v.tenant, v.max_running, v.weight, v.running, v.pending)
             for v in sm.list_tenants()],
            (sched.cron, sched.template, sched.next_fire_ms,
             [(f.fire_ms, f.outcome, f.task_id) for f in sched.fires]),
            sm.next_timer_ms(), sm.next_fire_ms(), sm.due_fires(sm.now_ms + 10 ** 6),
            sm.has_claimable(("email",), None, 0, sm.now_ms),
            sm.next_due_ms(("email",)), sm.stats()]


def test_snapshot_round_trip_keeps_digest_and_reads() -> None:
    d = _busy_driver()
    restored = StateMachine.restore(d.sm.snapshot())
    assert restored.digest() == d.sm.digest()
    assert _reads(restored) == _reads(d.sm)


def test_restored_machine_continues_identically() -> None:
    d = _busy_driver()
    twin = StateMachine.restore(d.sm.snapshot())
    later = [c.Tick(request_id="x1", now_ms=T0 + 10 ** 6),
             c.Claim(request_id="x2", now_ms=T0 + 10 ** 6, worker_id="w",
                     task_types=("email",), max_tasks=50),
             c.Cancel(request_id="x3", now_ms=T0 + 10 ** 6, task_id="t7")]
    for cmd in later:
        a, b = d.sm.apply(cmd), twin.apply(cmd)
        assert a.code == b.code
        if cmd.request_id == "x2":
            assert [t.task_id for t in a.value["tasks"]] == [t.task_id for t in b.value["tasks"]]
    assert d.sm.digest() == twin.digest()


def test_repeated_request_answers_the_same_after_restore() -> None:
    d = _busy_driver()
    twin = StateMachine.restore(d.sm.snapshot())

    def shape(result):
        value = result.value or {}
        task = value.get("task")
        return (result.code, result.message, sorted(value),
                task.task_id if task is not None else None,
                [t.task_id for t in value.get("tasks", [])])

    assert len(d.sm.requests) > 30
    for rid in d.sm.requests:
        cmd = c.Cancel(request_id=rid, now_ms=d.now, task_id="whatever")  # body is ignored
        assert shape(twin.apply(cmd)) == shape(d.sm.apply(cmd))
    assert twin.digest() == d.sm.digest()


def test_digest_changes_with_state_and_is_order_independent_of_derived_data() -> None:
    a, b = Driver(), Driver()
    a.add("x"), b.add("x")
    assert a.sm.digest() == b.sm.digest()
    a.claim()
    assert a.sm.digest() != b.sm.digest()


def test_restore_rejects_junk() -> None:
    with pytest.raises(DecodeError):
        StateMachine.restore(b"nope")
    with pytest.raises(DecodeError):
        StateMachine.restore(msgpack.packb({"v": 99}))


def _format1(cmds) -> bytes:
    """A batch as format 1 wrote it: [[tag, {field: value}], ...]."""
    import dataclasses

    def plain(v):
        if isinstance(v, (c.RetryPolicy, c.TaskTemplate)):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        return list(v) if isinstance(v, tuple) else v
    return msgpack.packb([[type(cmd).__name__, {f.name: plain(getattr(cmd, f.name))
                                                for f in dataclasses.fields(cmd)}]
                          for cmd in cmds], use_bin_type=True)


def test_batches_written_in_format_1_still_decode() -> None:
    assert codec.decode_batch(_format1(EXAMPLES)) == EXAMPLES


def test_a_fire_written_before_its_shard_field_decodes_without_a_shard() -> None:
    old = [codec.BATCH_FORMAT, ["Fire", "r", T0, "a", "s", 1, 2, False]]
    assert codec.decode_batch(msgpack.packb(old)) == [
        c.Fire(request_id="r", now_ms=T0, tenant="a", schedule_id="s", fire_ms=1,
               next_fire_ms=2)]
    with pytest.raises(DecodeError):
        codec.decode_batch(msgpack.packb([codec.BATCH_FORMAT, ["Fire", "r", T0, "a", "s", 1, 2]]))


def test_a_fire_without_a_shard_is_written_as_before_the_field_existed() -> None:
    """A single group's entries keep the old bytes, so a node of the previous release
    still reads them during a rolling upgrade; a shard's fire carries its shard."""
    fire = c.Fire(request_id="r", now_ms=T0, tenant="a", schedule_id="s", fire_ms=1,
                  next_fire_ms=2)
    assert msgpack.unpackb(codec.encode_batch([fire]))[1] == ["Fire", "r", T0, "a", "s", 1, 2,
                                                               False]
    sharded = dataclasses.replace(fire, shard=3)
    blob = codec.encode_batch([sharded])
    assert msgpack.unpackb(blob)[1][-1] == 3 and codec.decode_batch(blob) == [sharded]


def test_format_2_is_positional_and_smaller() -> None:
    blob = codec.encode_batch(EXAMPLES)
    items = msgpack.unpackb(blob)
    assert items[0] == codec.BATCH_FORMAT
    assert items[1][0] == "SubmitTask" and items[1][1] == "r1"
    assert len(blob) < len(_format1(EXAMPLES)) * 0.7


@pytest.mark.parametrize("items", [
    [3], [2, 5], [2, []], [2, ["Nope", "r", 1]], [2, ["Tick", "r"]], [2, ["Tick", "r", 1, 2]],
    [2, ["SubmitTask", "r", 1, "t", "a", "x", "null", 5, None, 1, 3, ["fixed", 1], None]],
    [2, ["SubmitTask", "r", 1, "t", "a", "x", "null", 5, None, 1, 3, {"backoff": "x"}, None]],
])
def test_format_2_junk_is_a_decode_error(items) -> None:
    with pytest.raises(DecodeError):
        codec.decode_batch(msgpack.packb(items))


def test_retry_policies_are_shared_only_between_exactly_equal_records() -> None:
    def submit(rid: str, retry: list) -> list:
        return ["SubmitTask", rid, 1, "t", "a", "x", "null", 5, None, 1, 3, retry, None]
    a, b, d = codec.decode_batch(msgpack.packb([2, submit("r1", ["fixed", 1, 1, 1, 1]),
                                                submit("r2", ["fixed", 1, 1, 1, 1]),
                                                submit("r3", ["fixed", True, 1, 1, 1])]))
    assert a.retry is b.retry
    assert type(d.retry.base_ms) is bool    # equal to 1, but not the same value
