"""The digests (digest.py): the state digest sees every command type's change and equal
states whatever their history; the rolling digest is equal for replicas that applied the
same batches (restored ones included) and differs once one of them answered differently."""
from __future__ import annotations

import pytest
from sm_support import T0, Driver

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import commands as c
from tsched.statemachine import codec
from tsched.statemachine.digest import full_hexdigest, roll_from_blob
from tsched.statemachine.graphs import compact

# A request table of 8 ids kept no longer than the millisecond they were recorded in
SMALL = Limits(requests_max=8, request_window_ms=0, request_ahead_ms_max=0,
               terminal_tasks_max=2, attempts_kept_max=2, fires_kept=2, retention_ms=60_000)


def _checked(d: Driver) -> str:
    """The state digest, after checking both digests against a restored twin's."""
    digest = d.sm.state_digest()
    assert digest == full_hexdigest(d.sm)
    twin = StateMachine.restore(d.sm.snapshot(), limits=d.sm.limits)
    assert twin.state_digest() == digest
    assert twin.digest() == d.sm.digest() and twin.roll == d.sm.roll
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
    """A claimed task (checked before the case's own change)."""
    task = d.claim_one()
    _checked(d)
    return task


def _pause_limit(d: Driver) -> None:
    d.ok(c.PutLimit, name="partner", rate=5)
    d.add("limited", tenant="other", task_type="call", limits=("partner",))
    task = d.claim_one(task_types=("call",))
    d.ok(c.PauseLimit, task_id=task.task_id, fencing_token=task.fencing_token,
         limit="partner", after_ms=1_000)


def _end_session_expired(d: Driver) -> None:
    """A worker's session ends silent: the task it held is given back."""
    d.ok(c.OpenSession, worker_id="w1", timeout_ms=3_000)
    d.claim_one()
    _checked(d)
    d.ok(c.EndSession, worker_id="w1", expired=True)


_STEPS = compact((
    ("a", "wa", "email", "null", 5, 60_000, 0, ("fixed", 1, 1, 1_000, 0), (), "cancel"),
    ("b", "wb", "email", "null", 5, 60_000, 0, ("fixed", 1, 1, 1_000, 0), (0,), "run")))


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
    "cancel_audited": lambda d: d.ok(c.Cancel, task_id="t3", actor="tenant:acme"),
    "put_schedule_audited": lambda d: d.ok(c.PutSchedule, tenant="acme", schedule_id="s",
                                           cron="*/7 * * * *", actor="admin",
                                           template=c.TaskTemplate(task_type="email"),
                                           next_fire_ms=T0 + 420_000),
    "audit_note": lambda d: d.ok(c.AuditNote, actor="admin", target="n1",
                                 action="cluster.transfer_leadership"),
    "put_limit": lambda d: d.ok(c.PutLimit, name="partner", rate=5, actor="admin"),
    "delete_limit": lambda d: (d.ok(c.PutLimit, name="partner", rate=5),
                               d.ok(c.DeleteLimit, name="partner")),
    "pause_limit": _pause_limit,
    "submit_workflow": lambda d: d.ok(c.SubmitWorkflow, workflow_id="w", tenant="acme",
                                      **_STEPS),
    "cancel_workflow": lambda d: (d.ok(c.SubmitWorkflow, workflow_id="w", tenant="acme",
                                       **_STEPS), _checked(d),
                                  d.ok(c.CancelWorkflow, workflow_id="w")),
    "pause_queue": lambda d: d.ok(c.PauseQueue, task_type="email", actor="admin"),
    "resume_queue": lambda d: (d.ok(c.PauseQueue, tenant="acme"),
                               d.ok(c.ResumeQueue, tenant="acme", actor="admin")),
    "open_session": lambda d: d.ok(c.OpenSession, worker_id="w1", timeout_ms=3_000),
    "end_session_expired": _end_session_expired,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_command_changes_the_state_digest_and_a_twin_agrees(name: str) -> None:
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


def test_request_table_eviction_keeps_twins_equal() -> None:
    d = _seeded(SMALL)
    for i in range(7):   # each submit records a request and evicts expired ones
        d.now += 1
        d.add(f"e{i}", tenant="acme")
        assert len(d.sm.requests) <= SMALL.requests_max
        _checked(d)
    assert "req-1" not in d.sm.requests and len(d.sm.requests) < 7


def test_equal_states_have_equal_state_digests_whatever_the_calls_in_between() -> None:
    a, b = _seeded(), _seeded()
    for d, look in ((a, True), (b, False)):
        task = d.claim_one()
        if look:
            d.sm.state_digest()
        d.ok(c.Heartbeat, task_id=task.task_id, fencing_token=task.fencing_token)
        if look:
            d.sm.digest()
        d.ok(c.Complete, task_id=task.task_id, fencing_token=task.fencing_token)
    assert a.sm.state_digest() == b.sm.state_digest()


def _submits(prefix: str, n: int) -> list:
    return [c.SubmitTask(request_id=f"{prefix}{i}", now_ms=T0, task_id=f"{prefix}{i}",
                         tenant="t", task_type="x") for i in range(n)]


def _committed(sm: StateMachine, cmds: list) -> list:
    """As a node applies an entry: decoded from its bytes (the roll hashes those)."""
    return sm.apply_batch(codec.decode_batch(codec.encode_batch(cmds)))


def test_a_restored_twin_stays_in_step() -> None:
    sm = StateMachine(limits=SMALL)
    _committed(sm, _submits("a", 3))
    twin = StateMachine.restore(sm.snapshot(), limits=SMALL)
    for m in (sm, twin):
        _committed(m, [c.Claim(request_id="c", now_ms=T0 + 1, worker_id="w",
                               task_types=("x",), max_tasks=2, lease_ms=10_000)])
        _committed(m, _submits("b", 2))
    assert twin.digest() == sm.digest() and twin.state_digest() == sm.state_digest()
    assert sm.roll != bytes(16)


def test_the_roll_covers_every_batch_and_each_result_code() -> None:
    a, b = StateMachine(), StateMachine()
    _committed(a, _submits("a", 2))
    _committed(b, _submits("a", 2))
    assert a.digest() == b.digest()
    _committed(a, [c.Cancel(request_id="x", now_ms=T0, task_id="a0")])
    before = b.digest()
    _committed(b, [c.Cancel(request_id="x", now_ms=T0, task_id="a0")])
    assert b.digest() != before                 # every batch moves the roll
    assert a.digest() == b.digest()
    # The same bytes answered differently (a replica that diverged): found from then on.
    b.tasks["a1"].state = "completed"           # behind the machine's back
    cmd = [c.Cancel(request_id="y", now_ms=T0, task_id="a1")]
    codes = [r.code for r in _committed(a, cmd)], [r.code for r in _committed(b, cmd)]
    assert codes[0] != codes[1]
    assert a.digest() != b.digest()
    _committed(a, _submits("z", 1)), _committed(b, _submits("z", 1))
    assert a.digest() != b.digest()


def test_a_change_behind_the_machines_back_is_seen_by_the_state_digest() -> None:
    d = _seeded()
    before, rolling = _checked(d), d.sm.digest()
    d.sm.tasks["t0"].payload_json = '"changed"'   # no result code shows it...
    assert d.sm.digest() == rolling                # ...so the rolling digest cannot
    assert d.sm.state_digest() != before           # but the state digest does


def test_a_snapshot_carries_its_roll_and_no_state_digest() -> None:
    """The roll, which a restored replica continues; the state digest's key is left empty
    (a pass over every record at every compaction, read by nothing), and the state
    restored from the snapshot still has the state digest of the state written."""
    import msgpack
    d = _seeded()
    head = msgpack.Unpacker(raw=False)
    head.feed(d.sm.snapshot())
    top = head.unpack()
    assert top["v"] == 8 and top["roll"] == d.sm.roll
    assert top["state_digest"] == ""
    assert StateMachine.restore(d.sm.snapshot(), limits=d.sm.limits).state_digest() \
        == d.sm.state_digest()


def test_a_format_1_snapshot_restores_to_the_same_state() -> None:
    import msgpack

    d = _seeded(SMALL)
    d.claim_one()
    sm = d.sm
    head = dict(sm._head(), v=1,
                tasks=[codec.task_record(t) for t in sorted(sm.tasks.values(),
                                                            key=lambda t: t.seq)],
                requests=[codec.request_record(r, rec) for r, rec in sm.requests.items()])
    head.pop("roll")
    blob = msgpack.packb(head, use_bin_type=True)
    old = StateMachine.restore(blob, limits=SMALL)
    assert old.state_digest() == sm.state_digest()
    assert old.roll == roll_from_blob(1, blob)   # no roll in it: the same for every reader
    assert StateMachine.restore(blob, limits=SMALL).digest() == old.digest()


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


def test_the_roll_of_a_large_entry_is_the_one_piece_hash_though_fed_in_pieces():
    """The roll hashes in pieces that keep the GIL; the digest must be the one an older
    replica computes in one piece (blake2b of roll, length, bytes, codes)."""
    import hashlib

    from tsched.statemachine.digest import roll_step
    raw = bytes(range(256)) * 40 + b"tail"        # over four pieces, the last one short
    codes = ["ok"] * 1_500                          # the codes too are over one piece
    h = hashlib.blake2b(b"r" * 16, digest_size=16)
    h.update(len(raw).to_bytes(8, "big"))
    h.update(raw)
    h.update("\0".join(codes).encode())
    assert roll_step(b"r" * 16, raw, codes) == h.digest()
