"""Paused queues in the state machine (pauses.py, pause_commands.py, issue 48)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tsched.statemachine import Limits, StateMachine, codec
from tsched.statemachine import commands as c
from tsched.statemachine.errors import INVALID_ARGUMENT, NOT_FOUND, TENANT_LIMIT
from tsched.statemachine.reshard import reshard

from sm_support import T0, Driver


def _ids(tasks) -> list[str]:
    return sorted(t.task_id for t in tasks)


def test_pause_by_type_holds_its_tasks_and_resume_lets_them_run() -> None:
    d = Driver()
    d.add("e1", task_type="email")
    d.add("s1", task_type="sms")
    v = d.ok(c.PauseQueue, task_type="email", reason="partner down", actor="admin")
    assert v["changed"] and v["pause"].paused_at_ms == T0 and v["pause"].actor == "admin"
    assert d.claim(task_types=("email", "sms"), max_tasks=10)[0].task_id == "s1"
    assert d.claim(task_types=("email",)) == []
    assert not d.sm.has_claimable(("email",), None, 0, d.now)
    assert d.sm.next_due_ms(("email",)) is None          # the timer does not wake for it
    assert d.sm.claim_head(("email",), None, 0, d.now) is None
    assert d.sm.store.pauses.of_task(d.sm.get_task("e1")).reason == "partner down"
    d.advance(60_000)
    v = d.ok(c.ResumeQueue, task_type="email", actor="admin")
    assert v["resumed_at_ms"] == T0 + 60_000 and v["pause"].paused_at_ms == T0
    assert d.sm.has_claimable(("email",), None, 0, d.now)
    assert d.claim_one().task_id == "e1"


def test_pause_by_tenant_and_by_both() -> None:
    d = Driver()
    for tenant in ("a", "b"):
        for task_type in ("email", "sms"):
            d.add(f"{tenant}-{task_type}", tenant=tenant, task_type=task_type)
    d.ok(c.PauseQueue, tenant="a")
    both = ("email", "sms")
    assert _ids(d.claim(task_types=both, max_tasks=10)) == ["b-email", "b-sms"]
    assert d.claim(task_types=both, tenant="a") == []
    d.ok(c.ResumeQueue, tenant="a")
    d.ok(c.PauseQueue, tenant="a", task_type="sms")
    assert _ids(d.claim(task_types=both, max_tasks=10)) == ["a-email"]
    assert d.claim(task_types=("sms",), tenant="a") == []
    d.ok(c.ResumeQueue, tenant="a", task_type="sms")
    assert _ids(d.claim(task_types=both, tenant="a")) == ["a-sms"]


def test_every_claim_path_skips_paused_work() -> None:
    d = Driver()
    d.add("now", priority=2)
    d.add("soon", run_at_ms=T0 + 500)
    d.ok(c.PauseQueue, task_type="email")
    assert d.claim(prefetch_ms=1_000) == []                          # early dispatch
    assert d.claim(priority_min=0, priority_max=3) == []             # a range
    assert d.claim(tier_weights=((0, 3, 1), (4, 10, 1))) == []       # weighted by tier
    assert not d.sm.has_claimable(("email",), None, 1_000, d.now, (0, 3))
    d.ok(c.ResumeQueue, task_type="email")
    assert d.claim(prefetch_ms=1_000, max_tasks=5)[0].task_id == "now"


def test_schedule_fires_while_paused_and_its_tasks_wait() -> None:
    d = Driver()
    tpl = c.TaskTemplate(task_type="report")
    d.ok(c.PutSchedule, tenant="acme", schedule_id="daily", cron="* * * * *", template=tpl,
         next_fire_ms=T0 + 60_000)
    d.ok(c.PauseQueue, task_type="report")
    d.now = T0 + 60_000
    fired = d.ok(c.Fire, tenant="acme", schedule_id="daily", fire_ms=T0 + 60_000,
                 next_fire_ms=T0 + 120_000)
    assert fired["task"].state == "pending"
    assert d.claim(task_types=("report",)) == []
    d.ok(c.ResumeQueue, task_type="report")
    assert d.claim(task_types=("report",))[0].task_id == fired["task"].task_id


def test_a_running_task_keeps_running_and_a_retry_waits() -> None:
    d = Driver()
    d.add("t1", retry=c.RetryPolicy(backoff="fixed", base_ms=1_000, max_ms=1_000,
                                    jitter_permille=0))
    t = d.claim_one()
    d.ok(c.PauseQueue, task_type="email")
    d.ok(c.Heartbeat, task_id="t1", fencing_token=t.fencing_token)
    d.ok(c.Fail, task_id="t1", fencing_token=t.fencing_token, error="boom")
    d.advance(5_000)
    assert d.claim() == []
    d.ok(c.ResumeQueue, task_type="email")
    assert d.claim_one().attempt == 2


def test_checks_and_bounds() -> None:
    d = Driver()
    assert d.run(c.PauseQueue).code == INVALID_ARGUMENT                 # no selector
    assert d.run(c.PauseQueue, task_type="").code == INVALID_ARGUMENT
    assert d.run(c.PauseQueue, tenant="x" * 65).code == INVALID_ARGUMENT
    assert d.run(c.PauseQueue, tenant="a", reason="r" * 257).code == INVALID_ARGUMENT
    assert d.run(c.ResumeQueue, tenant="a").code == NOT_FOUND
    d.ok(c.PauseQueue, tenant="a", reason="first", actor="admin")
    d.advance(1_000)
    again = d.ok(c.PauseQueue, tenant="a", reason="second", actor="admin")
    assert not again["changed"] and again["pause"].reason == "first"
    assert again["pause"].paused_at_ms == T0
    small = Driver(Limits(queue_pauses_max=1))
    small.ok(c.PauseQueue, tenant="a")
    assert small.run(c.PauseQueue, tenant="b").code == TENANT_LIMIT


def test_audited_once_per_change() -> None:
    d = Driver()
    d.ok(c.PauseQueue, task_type="email", tenant="acme", actor="admin")
    d.ok(c.PauseQueue, task_type="email", tenant="acme", actor="admin")   # no change
    d.ok(c.ResumeQueue, task_type="email", tenant="acme", actor="admin")
    entries = list(d.sm.audit.entries)
    assert [(e.action, e.target, e.tenant) for e in entries] == [
        ("queue.pause", "task_type=email,tenant=acme", "acme"),
        ("queue.resume", "task_type=email,tenant=acme", "acme")]


def test_a_repeated_request_gets_the_first_answer() -> None:
    d = Driver()
    first = d.run(c.PauseQueue, request_id="p", task_type="email")
    d.ok(c.ResumeQueue, task_type="email")
    again = d.run(c.PauseQueue, request_id="p", task_type="email")
    assert again.value["changed"] and again.value["pause"].task_type == "email"
    assert first.value["pause"].record() == again.value["pause"].record()
    assert not d.sm.store.pauses     # the repeat paused nothing again


def test_snapshot_digest_and_codec_carry_pauses() -> None:
    d = Driver()
    plain = d.sm.state_digest()
    d.add("e1")
    before = d.sm.state_digest()
    assert "queue_pauses" not in d.sm._head()             # absent while none stands
    d.ok(c.PauseQueue, task_type="email", reason="maintenance", actor="admin")
    assert d.sm.state_digest() != before != plain
    restored = StateMachine.restore(d.sm.snapshot())
    assert restored.state_digest() == d.sm.state_digest()
    assert restored.snapshot() == d.sm.snapshot()
    assert restored.store.pauses.records() == [["email", None, T0, "admin", "maintenance"]]
    assert restored.has_claimable(("email",), None, 0, T0) is False
    cmd = c.PauseQueue(request_id="r", now_ms=T0, tenant="a", reason="x", actor="admin")
    assert codec.decode_batch(codec.encode_batch([cmd]))[0] == cmd
    d.ok(c.ResumeQueue, task_type="email")
    assert d.sm.state_digest() != before    # the request table grew; no pause record left
    assert "queue_pauses" not in d.sm._head()


def test_reshard_puts_every_pause_on_every_shard() -> None:
    d = Driver()
    d.add("a1", tenant="a")
    d.add("b1", tenant="b")
    d.ok(c.PauseQueue, tenant="a")
    d.ok(c.PauseQueue, task_type="email")
    blobs = reshard([d.sm.snapshot()], 2, lambda tenant: 0 if tenant == "a" else 1)
    for blob in blobs:
        sm = StateMachine.restore(blob)
        assert [r[:2] for r in sm.store.pauses.records()] == [[None, "a"], ["email", None]]
        assert not sm.has_claimable(("email",), None, 0, T0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(("pause", "resume", "submit", "claim")),
                          st.sampled_from((None, "email", "sms")),
                          st.sampled_from((None, "a", "b"))), max_size=40))
def test_claims_never_take_a_paused_task_and_skip_nothing_else(steps) -> None:
    """Against a reference: a claim takes exactly the pending tasks no standing pause
    covers (all of them: max_tasks is large), whatever the history of pauses."""
    d = Driver()
    pending: dict[str, tuple[str, str]] = {}
    paused: set[tuple[str | None, str | None]] = set()
    for n, (op, task_type, tenant) in enumerate(steps):
        if op == "submit":
            kind, who = task_type or "email", tenant or "a"
            d.add(f"t{n}", task_type=kind, tenant=who)
            pending[f"t{n}"] = (kind, who)
        elif op == "pause" and (task_type or tenant):
            d.ok(c.PauseQueue, task_type=task_type, tenant=tenant)
            paused.add((task_type, tenant))
        elif op == "resume" and (task_type or tenant):
            r = d.run(c.ResumeQueue, task_type=task_type, tenant=tenant)
            assert r.ok == ((task_type, tenant) in paused)
            paused.discard((task_type, tenant))
        elif op == "claim":
            got = _ids(d.claim(task_types=("email", "sms"), max_tasks=100))
            free = sorted(tid for tid, (kind, who) in pending.items()
                          if not any(p[0] in (None, kind) and p[1] in (None, who)
                                     for p in paused))
            assert got == free
            for tid in got:
                del pending[tid]
        if n % 7 == 0:   # a restored replica decides alike
            restored = StateMachine.restore(d.sm.snapshot())
            assert restored.state_digest() == d.sm.state_digest()
            d.sm = restored
