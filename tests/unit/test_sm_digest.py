"""The incremental digest: equal to a from-scratch digest after every command type, equal
for equal states whatever their history, and proportional to the changes, not the state."""
from __future__ import annotations

from collections import OrderedDict

import pytest
from sm_support import T0, Driver

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import commands as c
from tsched.statemachine.digest import FifoHash, full_hexdigest

SMALL = Limits(requests_max=4, terminal_tasks_max=2, attempts_kept_max=2, fires_kept=2,
               retention_ms=60_000)


def _checked(d: Driver) -> str:
    """The digest, after checking it against a from-scratch one and a restored twin's."""
    digest = d.sm.digest()
    assert digest == d.sm._full_digest() == full_hexdigest(d.sm)
    twin = StateMachine.restore(d.sm.snapshot(), limits=d.sm.limits)
    assert twin.digest() == digest == twin._full_digest()
    return digest


def _seeded(limits: Limits | None = None) -> Driver:
    d = Driver(limits=limits)
    d.ok(c.SetTenant, tenant="acme", max_running=3, weight=2)
    for i in range(4):
        d.add(f"t{i}", priority=i, idempotency_key=f"k{i}")
    d.ok(c.PutSchedule, tenant="acme", schedule_id="s", cron="* * * * *",
         template=c.TaskTemplate(task_type="email"), next_fire_ms=T0 + 60_000)
    _checked(d)
    return d


def _running(d: Driver):
    """A claimed task, folded into the digest already (so the case's own change must be
    marked on its own)."""
    task = d.claim_one()
    _checked(d)
    return task


# Each case: (name, action(driver) -> None). Every command type appears at least once,
# including the paths that change a task without moving it (heartbeat, cancel of a
# running task) and rejections (no change but a request-table entry).
CASES = {
    "submit": lambda d: d.add("new", tenant="other"),
    "submit_duplicate_key": lambda d: d.submit("dup", idempotency_key="k1"),
    "submit_rejected": lambda d: d.submit("t1"),
    "claim": lambda d: d.claim(max_tasks=2),
    "claim_nothing": lambda d: d.claim(task_types=("none",)),
    "heartbeat": lambda d: (lambda t: (setattr(d, "now", d.now + 5_000),
                                       d.ok(c.Heartbeat, task_id=t.task_id,
                                            fencing_token=t.fencing_token)))(_running(d)),
    "complete": lambda d: (lambda t: d.ok(c.Complete, task_id=t.task_id,
                                          fencing_token=t.fencing_token,
                                          result_json="7"))(_running(d)),
    "complete_stale": lambda d: d.run(c.Complete, task_id="t0", fencing_token=99),
    "fail_retry": lambda d: (lambda t: d.ok(c.Fail, task_id=t.task_id,
                                            fencing_token=t.fencing_token,
                                            error="boom"))(_running(d)),
    "fail_final": lambda d: (lambda t: d.ok(c.Fail, task_id=t.task_id,
                                            fencing_token=t.fencing_token, error="x",
                                            retryable=False))(_running(d)),
    "release": lambda d: (lambda t: d.ok(c.Release, task_id=t.task_id,
                                         fencing_token=t.fencing_token))(_running(d)),
    "cancel_pending": lambda d: d.ok(c.Cancel, task_id="t3"),
    "cancel_running": lambda d: (lambda t: d.ok(c.Cancel, task_id=t.task_id))(_running(d)),
    "replay": lambda d: (lambda t: (d.ok(c.Fail, task_id=t.task_id,
                                         fencing_token=t.fencing_token, error="x",
                                         retryable=False),
                                    _checked(d),
                                    d.ok(c.Replay, task_id=t.task_id)))(_running(d)),
    "discard": lambda d: (lambda t: (d.ok(c.Fail, task_id=t.task_id,
                                          fencing_token=t.fencing_token, error="x",
                                          retryable=False),
                                     _checked(d),
                                     d.ok(c.Discard, task_id=t.task_id)))(_running(d)),
    "set_tenant": lambda d: d.ok(c.SetTenant, tenant="acme", weight=5),
    "set_new_tenant": lambda d: d.ok(c.SetTenant, tenant="zeta", max_running=1),
    "put_schedule_replace": lambda d: d.ok(c.PutSchedule, tenant="acme", schedule_id="s",
                                           cron="*/5 * * * *",
                                           template=c.TaskTemplate(task_type="email"),
                                           next_fire_ms=T0 + 300_000),
    "put_schedule_new": lambda d: d.ok(c.PutSchedule, tenant="acme", schedule_id="s2",
                                       cron="@daily", template=c.TaskTemplate(task_type="x"),
                                       next_fire_ms=T0 + 86_400_000),
    "delete_schedule": lambda d: d.ok(c.DeleteSchedule, tenant="acme", schedule_id="s"),
    "pause_schedule": lambda d: d.ok(c.PauseSchedule, tenant="acme", schedule_id="s"),
    "resume_schedule": lambda d: (d.ok(c.PauseSchedule, tenant="acme", schedule_id="s"),
                                  _checked(d),
                                  d.ok(c.ResumeSchedule, tenant="acme", schedule_id="s",
                                       next_fire_ms=T0 + 120_000)),
    "fire": lambda d: (setattr(d, "now", T0 + 60_000),
                       d.ok(c.Fire, tenant="acme", schedule_id="s", fire_ms=T0 + 60_000,
                            next_fire_ms=T0 + 120_000)),
    "fire_manual": lambda d: d.ok(c.Fire, tenant="acme", schedule_id="s", fire_ms=T0,
                                  next_fire_ms=T0 + 60_000, manual=True),
    "fire_missed": lambda d: (setattr(d, "now", T0 + 10 ** 7),
                              d.ok(c.Fire, tenant="acme", schedule_id="s",
                                   fire_ms=T0 + 60_000, next_fire_ms=T0 + 120_000)),
    "tick_expires_lease": lambda d: (_running(d), d.advance(31_000)),
    "tick_evicts_terminal": lambda d: ([d.ok(c.Cancel, task_id=f"t{i}") for i in range(3)],
                                       _checked(d), d.advance(120_000)),
    "barrier": lambda d: d.sm.apply_batch([c.Barrier(request_id="b", now_ms=d.now + 1)]),
    "repeat_request": lambda d: d.run(c.SetTenant, request_id="req-1", tenant="acme",
                                      weight=9),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_command_keeps_the_incremental_digest_exact(name: str) -> None:
    d = _seeded()
    before = _checked(d)
    CASES[name](d)
    after = _checked(d)
    if name != "repeat_request":   # everything else records a request or moves the clock
        assert after != before


def test_cases_cover_every_command_type() -> None:
    names = " ".join(CASES)
    for cls in c.COMMAND_TYPES:
        snake = "".join("_" + ch.lower() if ch.isupper() else ch for ch in cls.__name__)[1:]
        assert snake.replace("_task", "") in names, cls.__name__


def test_request_table_eviction_keeps_the_digest_exact() -> None:
    d = _seeded(SMALL)
    for i in range(7):   # each submit records a request and evicts the oldest
        d.add(f"e{i}", tenant="acme")
        assert len(d.sm.requests) == SMALL.requests_max
        _checked(d)


def test_many_evictions_between_two_digests() -> None:
    d = _seeded(SMALL)
    for i in range(11):
        d.add(f"e{i}")
    _checked(d)


def test_equal_states_have_equal_digests_whatever_the_calls_in_between() -> None:
    a, b = _seeded(), _seeded()
    for d, look in ((a, True), (b, False)):
        task = d.claim_one()
        if look:
            d.sm.digest()
        d.ok(c.Heartbeat, task_id=task.task_id, fencing_token=task.fencing_token)
        if look:
            d.sm.digest()
        d.ok(c.Complete, task_id=task.task_id, fencing_token=task.fencing_token)
    assert a.sm.digest() == b.sm.digest()


def test_a_restored_twin_stays_in_step() -> None:
    d = _seeded(SMALL)
    twin = Driver(limits=SMALL)
    twin.sm = StateMachine.restore(d.sm.snapshot(), limits=SMALL)
    twin.n, twin.now = d.n, d.now
    for drv in (d, twin):
        task = drv.claim_one()
        drv.ok(c.Fail, task_id=task.task_id, fencing_token=task.fencing_token, error="e")
        drv.add("late", tenant="b")
    assert twin.sm.digest() == d.sm.digest() == twin.sm._full_digest()


def test_digest_work_follows_the_changes_not_the_state() -> None:
    d = Driver()
    for i in range(300):
        d.add(f"bulk{i}")
    d.sm.digest()
    task = d.claim_one()
    d.ok(c.Heartbeat, task_id=task.task_id, fencing_token=task.fencing_token)
    assert list(d.sm._digest.tasks.dirty) == [task.task_id]
    assert d.sm.digest() == d.sm._full_digest()
    assert not d.sm._digest.tasks.dirty


def test_request_order_counts() -> None:
    a = FifoHash(OrderedDict([("r1", (1,)), ("r2", (2,))]))
    b = FifoHash(OrderedDict([("r2", (2,)), ("r1", (1,))]))
    a.fold(), b.fold()
    assert a.acc != b.acc


def test_task_hash_depends_on_every_replicated_field() -> None:
    d = _seeded()
    before = _checked(d)
    task = d.sm.tasks["t0"]
    task.payload_json = '"changed"'          # a change behind the machine's back...
    assert d.sm.digest() == before            # ...is invisible to the incremental digest
    assert d.sm._full_digest() != before      # but the reference sees it (the tests' net)


def _submits(prefix: str, n: int) -> list:
    return [c.SubmitTask(request_id=f"{prefix}{i}", now_ms=T0, task_id=f"{prefix}{i}",
                         tenant="t", task_type="x") for i in range(n)]


def test_a_batch_folds_the_oldest_changes_beyond_the_window(monkeypatch) -> None:
    from tsched.statemachine import machine
    monkeypatch.setattr(machine, "DIGEST_DIRTY_MAX", 3)
    sm = StateMachine()
    sm.apply_batch(_submits("a", 2))
    assert list(sm._digest.tasks.dirty) == ["a0", "a1"]     # within the window: left
    sm.apply_batch(_submits("b", 2))
    assert list(sm._digest.tasks.dirty) == ["a1", "b0", "b1"]   # the oldest one folded
    assert sm.digest() == sm._full_digest()
    assert not sm._digest.tasks.dirty


def test_a_task_changed_again_moves_to_the_back_and_is_hashed_once(monkeypatch) -> None:
    from tsched.statemachine import digest as digest_mod, machine
    monkeypatch.setattr(machine, "DIGEST_DIRTY_MAX", 2)
    sm = StateMachine()
    hashed = []
    sm._digest.tasks.hash_of = lambda t: hashed.append(t.task_id) or digest_mod.task_hash(t)
    sm.apply_batch(_submits("a", 2))
    sm.apply_batch([c.Cancel(request_id="x", now_ms=T0, task_id="a0")])   # a0 again
    assert list(sm._digest.tasks.dirty) == ["a1", "a0"]
    sm.apply_batch(_submits("b", 1))
    assert hashed == ["a1"]                     # the oldest change, not the task that moved
    assert sm.digest() == sm._full_digest()
    assert sorted(hashed) == ["a0", "a1", "b0"]  # each hashed once


def test_the_digest_can_be_brought_up_to_date_in_slices() -> None:
    sm = StateMachine()
    sm.apply_batch(_submits("a", 10))
    assert sm.fold_digest(4) == sm._digest.backlog() > 0
    left = sm.fold_digest(4)
    assert left == sm._digest.backlog()
    while sm.fold_digest(4):
        pass
    assert sm._digest.backlog() == 0
    assert sm.digest() == sm._full_digest()


def test_a_format_1_snapshot_restores_to_the_same_digest() -> None:
    import msgpack

    from tsched.statemachine import codec
    d = _seeded(SMALL)
    d.claim_one()
    sm = d.sm
    head = dict(sm._head(), v=1,
                tasks=[codec.task_record(t) for t in sorted(sm.tasks.values(),
                                                            key=lambda t: t.seq)],
                requests=[codec.request_record(r, rec) for r, rec in sm.requests.items()])
    old = StateMachine.restore(msgpack.packb(head, use_bin_type=True), limits=SMALL)
    assert old.digest() == sm.digest() == old._full_digest()
    assert old.snapshot() == sm.snapshot()


@pytest.mark.parametrize("cut", ["truncated", "trailing", "count"])
def test_a_damaged_snapshot_is_a_decode_error(cut: str) -> None:
    import msgpack

    from tsched.statemachine.codec import DecodeError
    blob = _seeded().sm.snapshot()
    if cut == "truncated":
        blob = blob[:-3]
    elif cut == "trailing":
        blob += b"\x00"
    else:
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(blob)
        head = unpacker.unpack()
        blob = msgpack.packb(dict(head, task_count=-1)) + blob[unpacker.tell():]
    with pytest.raises(DecodeError):
        StateMachine.restore(blob)
