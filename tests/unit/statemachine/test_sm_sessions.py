"""Worker sessions in the state machine (statemachine/sessions.py, DESIGN 9): an expired
session gives its worker's tasks back at once, fenced; a clean end touches nothing; the
sessions are in snapshots and the digest."""
from __future__ import annotations

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import commands as c

from sm_support import COMPILED, Driver


def _held(d: Driver, worker_id: str, n: int, **fields) -> list:
    return [d.claim_one(worker_id=worker_id, **fields) for _ in range(n)]


def test_an_expired_session_gives_its_workers_tasks_back_at_once() -> None:
    d = Driver()
    for _ in range(4):
        d.add()
    d.ok(c.OpenSession, worker_id="w1", timeout_ms=3_000)
    mine = _held(d, "w1", 2, lease_ms=60_000)
    other = d.claim_one(worker_id="w2", lease_ms=60_000)
    d.now += 3_500
    answer = d.ok(c.EndSession, worker_id="w1", expired=True)["session"]
    assert answer["given_back"] == 2 and "w1" not in d.sm.sessions
    for task in mine:
        assert task.state == "pending" and task.run_at_ms <= d.now   # due at once
        last = task.attempts[-1]
        assert (last.outcome, last.error) == ("lease_expired", "worker session expired")
        assert last.ended_at_ms == d.now and task.failures == 1
    assert other.state == "running"   # another worker's lease is untouched
    late = d.run(c.Complete, task_id=mine[0].task_id, fencing_token=mine[0].fencing_token)
    assert late.code == "stale_token"   # the cut-off worker's late report is refused
    again = d.claim(worker_id="w3", max_tasks=10)
    assert {t.task_id for t in again} == {t.task_id for t in mine} | {"t4"}


def test_a_clean_end_leaves_the_tasks_leased() -> None:
    d = Driver()
    d.add()
    d.ok(c.OpenSession, worker_id="w1", timeout_ms=3_000)
    task = d.claim_one(worker_id="w1")
    assert d.ok(c.EndSession, worker_id="w1")["session"]["given_back"] == 0
    assert task.state == "running"
    assert d.run(c.EndSession, worker_id="w1").code == "not_found"


def test_expiry_respects_cancels_and_the_retry_budget() -> None:
    d = Driver()
    d.add("c")
    d.add("last", max_retries=0)
    d.ok(c.OpenSession, worker_id="w1", timeout_ms=3_000)
    cancelled, last = _held(d, "w1", 2)
    d.ok(c.Cancel, task_id="c")
    d.ok(c.EndSession, worker_id="w1", expired=True)
    assert cancelled.state == "cancelled" and last.state == "dead_letter"


def test_a_tenant_scoped_session_gives_back_only_its_tenants_tasks() -> None:
    d = Driver()
    d.add(tenant="acme")
    d.add(tenant="other")
    d.ok(c.OpenSession, worker_id="w1", timeout_ms=3_000, tenant="acme")
    mine, theirs = _held(d, "w1", 2)
    # another tenant cannot see, change or end it
    assert d.run(c.OpenSession, worker_id="w1", timeout_ms=9_000,
                 tenant="other").code == "not_found"
    assert d.run(c.EndSession, worker_id="w1", tenant="other").code == "not_found"
    d.ok(c.EndSession, worker_id="w1", expired=True)
    assert {mine.tenant: mine.state, theirs.tenant: theirs.state} == {
        "acme": "pending", "other": "running"}


def test_bounds_are_refused() -> None:
    d = Driver(limits=Limits(sessions_max=1))
    # a compiled build types the field: a string or None cannot reach its check there (the
    # API and the codec refuse them first)
    for timeout_ms in (999, 60_001, *(() if COMPILED else ("3000", None))):
        assert d.run(c.OpenSession, worker_id="w1",
                     timeout_ms=timeout_ms).code == "invalid_argument"
    assert d.run(c.OpenSession, worker_id="", timeout_ms=3_000).code == "invalid_argument"
    d.ok(c.OpenSession, worker_id="w1", timeout_ms=3_000)
    assert d.ok(c.OpenSession, worker_id="w1", timeout_ms=5_000)["session"]["created"] is False
    assert d.sm.sessions["w1"].timeout_ms == 5_000
    assert d.run(c.OpenSession, worker_id="w2", timeout_ms=3_000).code == "tenant_limit"
    if not COMPILED:    # a compiled build types the field (the codec refuses it first)
        assert d.run(c.EndSession, worker_id="w1", expired=1).code == "invalid_argument"


def test_sessions_are_in_snapshots_and_the_digest() -> None:
    d = Driver()
    empty = d.sm.state_digest()
    d.ok(c.OpenSession, worker_id="w1", timeout_ms=3_000, tenant="acme")
    d.ok(c.OpenSession, worker_id="w0", timeout_ms=7_000)
    assert d.sm.state_digest() != empty
    restored = StateMachine.restore(d.sm.snapshot())
    assert restored.state_digest() == d.sm.state_digest()
    assert [(s.worker_id, s.tenant, s.timeout_ms) for s in restored.sessions.values()] == [
        ("w0", None, 7_000), ("w1", "acme", 3_000)]
    # a state without sessions writes no `sessions` key (the snapshot format is unchanged)
    assert "sessions" not in StateMachine()._head()


def test_a_reshard_carries_no_session() -> None:
    from tsched.statemachine.reshard import reshard
    d = Driver()
    d.add()
    d.ok(c.OpenSession, worker_id="w1", timeout_ms=3_000)
    d.claim_one(worker_id="w1")
    blobs = reshard([d.sm.snapshot()], 2, lambda tenant: 0)
    states = [StateMachine.restore(b) for b in blobs]
    assert [s.sessions for s in states] == [{}, {}]
    assert states[0].tasks["t1"].state == "running"   # its lease still holds it
