"""Task lifecycle rules: transitions, validation, leases, completion, retries, dead letters."""
from __future__ import annotations

import pytest
from sm_support import T0, Driver

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import commands as c
from tsched.statemachine import errors as e
from tsched.statemachine.rules import backoff_ms


# --- submit -----------------------------------------------------------------------------------

def test_submit_defaults_and_reads() -> None:
    d = Driver()
    task = d.add("a", payload_json='{"to":"x"}')
    assert (task.state, task.priority, task.run_at_ms, task.attempt) == ("pending", 5, T0, 0)
    assert task.execution_id == "a" and task.attempts == () and task.created_at_ms == T0
    assert d.sm.get_task("a") is task and d.sm.get_task("a", tenant="other") is None
    assert d.sm.get_tenant("acme").pending == 1


def test_text_beyond_ascii_is_taken_within_its_byte_bound() -> None:
    d = Driver()
    payload = '"' + "é" * 32_000 + '"'        # 64,002 bytes: within 65,536
    d.add("t-é", tenant="café", task_type="mail-ü", payload_json=payload)
    task = d.sm.get_task("t-é")
    assert (task.tenant, task.task_type, task.payload_json) == ("café", "mail-ü", payload)


@pytest.mark.parametrize("fields, code", [
    ({"priority": 11}, e.INVALID_ARGUMENT), ({"priority": -1}, e.INVALID_ARGUMENT),
    ({"priority": True}, e.INVALID_ARGUMENT), ({"priority": "5"}, e.INVALID_ARGUMENT),
    ({"tenant": ""}, e.INVALID_ARGUMENT), ({"tenant": "x" * 65}, e.INVALID_ARGUMENT),
    ({"task_type": None}, e.INVALID_ARGUMENT), ({"timeout_ms": 999}, e.INVALID_ARGUMENT),
    ({"max_retries": 101}, e.INVALID_ARGUMENT), ({"payload_json": 5}, e.INVALID_ARGUMENT),
    ({"payload_json": "x" * 65_537}, e.TOO_LARGE),
    ({"payload_json": "é" * 40_000}, e.TOO_LARGE),   # 80,000 bytes in 40,000 characters
    ({"run_at_ms": T0 + 367 * 86_400_000}, e.INVALID_ARGUMENT),
    ({"run_at_ms": -1}, e.INVALID_ARGUMENT), ({"idempotency_key": ""}, e.INVALID_ARGUMENT),
    ({"retry": "fast"}, e.INVALID_ARGUMENT),
    ({"retry": c.RetryPolicy(backoff="random")}, e.INVALID_ARGUMENT),
    ({"retry": c.RetryPolicy(base_ms=10, max_ms=5)}, e.INVALID_ARGUMENT),
    ({"retry": c.RetryPolicy(multiplier_milli=999)}, e.INVALID_ARGUMENT),
    ({"retry": c.RetryPolicy(jitter_permille=1001)}, e.INVALID_ARGUMENT),
    ({"task_id": "\ud800"}, e.INVALID_ARGUMENT),
    ({"tenant": "acm\udc80"}, e.INVALID_ARGUMENT),
    ({"payload_json": '"\ud800"'}, e.INVALID_ARGUMENT),     # within the size, not UTF-8
])
def test_submit_rejections_change_nothing(fields, code) -> None:
    d = Driver()
    before = d.sm.digest()
    result = d.submit(**fields)
    assert result.code == code, result
    assert d.sm.tasks == {}
    # only the request table grew (so that a retried request gets the same answer)
    assert len(d.sm.requests) == 1 and before != d.sm.digest()


def test_malformed_envelope_is_invalid_and_unrecorded() -> None:
    d = Driver()
    for cmd in (c.Tick(request_id=5, now_ms=T0), c.Tick(request_id="r", now_ms=-1),
                c.Barrier(request_id="r", now_ms=2 ** 60), "not a command", None):
        assert d.sm.apply(cmd).code == e.INVALID_ARGUMENT
    assert d.sm.requests == {} and d.sm.now_ms == 0


def test_conflicting_task_id() -> None:
    d = Driver()
    d.add("a")
    assert d.submit("a").code == e.CONFLICT


def test_idempotency_key_dedups_even_with_other_fields() -> None:
    d = Driver()
    first = d.add("a", idempotency_key="inv-42", priority=1)
    again = d.submit("b", idempotency_key="inv-42", priority=9, task_type="other")
    assert again.ok and again.value == {"task": first, "duplicate": True}
    assert "b" not in d.sm.tasks
    other_tenant = d.submit("c", tenant="beta", idempotency_key="inv-42")
    assert other_tenant.value["duplicate"] is False


def test_idempotency_key_is_free_again_after_eviction() -> None:
    d = Driver(Limits(retention_ms=1_000))
    t = d.add("a", idempotency_key="k")
    d.ok(c.Cancel, task_id="a")
    d.advance(1_000)
    assert d.sm.get_task("a") is None
    assert d.submit("b", idempotency_key="k").value["duplicate"] is False
    assert t.state == "cancelled"


def test_repeated_request_id_returns_the_first_result() -> None:
    d = Driver()
    first = d.run(c.SubmitTask, request_id="same", task_id="a", tenant="acme", task_type="x")
    again = d.run(c.SubmitTask, request_id="same", task_id="b", tenant="acme", task_type="x")
    assert again == first and list(d.sm.tasks) == ["a"]
    rejected = d.run(c.Cancel, request_id="cx", task_id="nope")
    d.add("nope")
    assert d.run(c.Cancel, request_id="cx", task_id="nope") == rejected
    assert rejected.code == e.NOT_FOUND and d.sm.get_task("nope").state == "pending"


def test_request_table_is_bounded_fifo() -> None:
    """Full, with every id still in its window: a new write is refused, not an id forgotten;
    once the oldest are past the window they go first (test_sm_request_window.py: more)."""
    lim = Limits(requests_max=3)
    d = Driver(lim)
    for i in range(3):
        d.run(c.SetTenant, request_id=f"r{i}", tenant="acme", weight=1 + i)
    full = d.run(c.SetTenant, request_id="r3", tenant="acme", weight=4)
    assert full.code == e.TENANT_LIMIT and full.details["limit"] == "requests_max"
    assert list(d.sm.requests) == ["r0", "r1", "r2"]
    d.now += lim.request_window_ms + lim.request_ahead_ms_max + 1
    for i in range(3, 5):
        d.run(c.SetTenant, request_id=f"r{i}", tenant="acme", weight=1 + i)
    assert list(d.sm.requests) == ["r3", "r4"]   # r0-r2 expired: the first write took them
    # r0 fell out: it applies again
    assert d.run(c.SetTenant, request_id="r0", tenant="acme", weight=77).value["tenant"].weight == 77


def test_tenant_limits() -> None:
    d = Driver(Limits(live_tasks_per_tenant_max=2, live_tasks_max=3, tenants_max=2))
    d.add(tenant="a"), d.add(tenant="a")
    assert d.submit(tenant="a").code == e.TENANT_LIMIT
    d.add(tenant="b")
    assert d.submit(tenant="b").code == e.TENANT_LIMIT   # the global live limit
    assert d.submit(tenant="c").code == e.TENANT_LIMIT   # the tenant count
    assert d.run(c.SetTenant, tenant="c", weight=2).code == e.TENANT_LIMIT


def test_clock_never_moves_back() -> None:
    d = Driver()
    d.tick(T0 + 5_000)
    d.now = T0
    task = d.add("a")
    assert d.sm.now_ms == T0 + 5_000 and task.created_at_ms == T0 + 5_000


# --- claim, heartbeat, complete -----------------------------------------------------------------

def test_claim_grants_a_lease_and_token() -> None:
    d = Driver()
    d.add("a", timeout_ms=60_000)
    t = d.claim_one(lease_ms=10_000, worker_id="w7")
    assert (t.state, t.attempt, t.fencing_token, t.worker_id) == ("running", 1, 1, "w7")
    assert (t.started_at_ms, t.lease_expires_at_ms) == (T0, T0 + 10_000)
    assert [(a.attempt, a.worker_id, a.fencing_token, a.outcome) for a in t.attempts] == \
        [(1, "w7", 1, None)]
    assert d.sm.get_tenant("acme").running == 1


@pytest.mark.parametrize("fields", [{"lease_ms": 999}, {"lease_ms": 3_600_001},
                                    {"max_tasks": 0}, {"max_tasks": 101}, {"prefetch_ms": 1001},
                                    {"task_types": ()}, {"task_types": ("a", 3)},
                                    {"task_types": "email"}, {"worker_id": ""}])
def test_claim_rejections(fields) -> None:
    d = Driver()
    d.add()
    args = {"worker_id": "w", "task_types": ("email",), **fields}
    assert d.run(c.Claim, **args).code == e.INVALID_ARGUMENT
    assert d.sm.cluster_token == 0


def test_heartbeat_extends_within_timeout() -> None:
    d = Driver()
    d.add("a", timeout_ms=50_000)
    t = d.claim_one(lease_ms=30_000)
    d.now += 10_000
    hb = d.ok(c.Heartbeat, task_id="a", fencing_token=t.fencing_token, lease_ms=30_000)
    assert hb == {"lease_expires_at_ms": T0 + 40_000, "cancel_requested": False}
    d.now += 20_000
    hb = d.ok(c.Heartbeat, task_id="a", fencing_token=t.fencing_token, lease_ms=30_000)
    assert hb["lease_expires_at_ms"] == T0 + 50_000      # never past started + timeout


def test_heartbeat_token_checks() -> None:
    d = Driver()
    d.add("a")
    t = d.claim_one()
    wrong = d.run(c.Heartbeat, task_id="a", fencing_token=t.fencing_token + 1)
    assert wrong.code == e.STALE_TOKEN and str(t.fencing_token) in wrong.message
    d.ok(c.Complete, task_id="a", fencing_token=t.fencing_token)
    assert d.run(c.Heartbeat, task_id="a", fencing_token=t.fencing_token).code == e.STALE_TOKEN
    d.add("b")
    assert d.run(c.Heartbeat, task_id="b", fencing_token=5).code == e.INVALID_STATE
    assert d.run(c.Heartbeat, task_id="zz", fencing_token=1).code == e.NOT_FOUND
    assert d.run(c.Heartbeat, task_id="a", fencing_token=1, tenant="x").code == e.NOT_FOUND


def test_complete_is_idempotent_and_fenced() -> None:
    d = Driver()
    d.add("a")
    t = d.claim_one()
    assert d.run(c.Complete, task_id="a", fencing_token=99).code == e.STALE_TOKEN
    d.now += 5
    d.ok(c.Complete, task_id="a", fencing_token=t.fencing_token, result_json='{"n":1}')
    again = d.ok(c.Complete, task_id="a", fencing_token=t.fencing_token, result_json='"other"')
    assert again["task"].result_json == '{"n":1}' and t.completed_at_ms == T0 + 5
    assert t.attempts[-1].outcome == "completed" and t.lease_expires_at_ms is None
    assert d.run(c.Fail, task_id="a", fencing_token=t.fencing_token).code == e.STALE_TOKEN
    big = d.run(c.Complete, task_id="a", fencing_token=t.fencing_token,
                result_json="x" * 65_537)
    assert big.code == e.TOO_LARGE


def test_completion_wins_over_cancel_request() -> None:
    d = Driver()
    d.add("a")
    t = d.claim_one()
    d.ok(c.Cancel, task_id="a")
    assert t.cancel_requested and t.state == "running"
    hb = d.ok(c.Heartbeat, task_id="a", fencing_token=t.fencing_token, lease_ms=60_000)
    assert hb == {"lease_expires_at_ms": T0 + 30_000, "cancel_requested": True}  # not renewed
    d.ok(c.Complete, task_id="a", fencing_token=t.fencing_token)
    assert t.state == "completed"


# --- fail and retries -------------------------------------------------------------------------

def test_fail_retries_with_backoff_then_dead_letters() -> None:
    d = Driver()
    policy = c.RetryPolicy(backoff="exponential", base_ms=1_000, max_ms=60_000,
                           multiplier_milli=2_000, jitter_permille=0)
    d.add("a", max_retries=2, retry=policy)
    runs = []
    for expected_delay in (1_000, 2_000):
        t = d.claim_one()
        d.ok(c.Fail, task_id="a", fencing_token=t.fencing_token, error="boom")
        assert t.state == "pending" and t.run_at_ms == d.now + expected_delay
        assert d.claim() == []            # backing off
        d.now = t.run_at_ms
        runs.append(t.attempt)
    t = d.claim_one()
    d.ok(c.Fail, task_id="a", fencing_token=t.fencing_token, error="boom")
    assert t.state == "dead_letter" and t.attempt == 3 and t.last_error == "boom"
    assert [a.outcome for a in t.attempts] == ["failed"] * 3
    assert d.sm.list_tasks(state="dead_letter")[0] == [t]


def test_non_retryable_fail_dead_letters_at_once() -> None:
    d = Driver()
    d.add("a", max_retries=5)
    t = d.claim_one()
    d.ok(c.Fail, task_id="a", fencing_token=t.fencing_token, retryable=False)
    assert t.state == "dead_letter"


def test_repeated_fail_returns_first_result() -> None:
    d = Driver()
    d.add("a")
    t = d.claim_one()
    first = d.ok(c.Fail, task_id="a", fencing_token=t.fencing_token, error="x")
    again = d.ok(c.Fail, task_id="a", fencing_token=t.fencing_token, error="y")
    assert first == again and t.failures == 1 and t.last_error == "x"
    assert d.run(c.Fail, task_id="a", fencing_token=t.fencing_token,
                 error="e" * 8_193).code == e.TOO_LARGE
    assert d.run(c.Fail, task_id="a", fencing_token=1, retryable=1).code == e.INVALID_ARGUMENT


def test_fail_of_cancel_requested_task_cancels() -> None:
    d = Driver()
    d.add("a", max_retries=3)
    t = d.claim_one()
    d.ok(c.Cancel, task_id="a")
    d.ok(c.Fail, task_id="a", fencing_token=t.fencing_token)
    assert t.state == "cancelled" and t.failures == 0


@pytest.mark.parametrize("kind, delays", [
    ("exponential", [1_000, 3_000, 9_000, 10_000, 10_000]),
    ("linear", [1_000, 2_000, 3_000, 4_000, 5_000]),
    ("fixed", [1_000] * 5),
])
def test_backoff_kinds_and_cap(kind, delays) -> None:
    p = c.RetryPolicy(backoff=kind, base_ms=1_000, max_ms=10_000, multiplier_milli=3_000,
                      jitter_permille=0)
    assert [backoff_ms(p, n, "t", n) for n in range(1, 6)] == delays


def test_backoff_jitter_is_deterministic_and_bounded() -> None:
    p = c.RetryPolicy(backoff="fixed", base_ms=10_000, max_ms=10_000, jitter_permille=500)
    values = [backoff_ms(p, 1, f"task-{i}", 1) for i in range(200)]
    assert all(5_000 <= v <= 10_000 for v in values)
    assert len(set(values)) > 50                    # it spreads
    assert values == [backoff_ms(p, 1, f"task-{i}", 1) for i in range(200)]
    assert backoff_ms(p, 1, "t", 1) != backoff_ms(p, 1, "t", 2) or \
        backoff_ms(p, 1, "t", 3) != backoff_ms(p, 1, "t", 4)


# --- leases and timeouts ------------------------------------------------------------------------

def test_lease_expiry_retries_then_dead_letters() -> None:
    d = Driver()
    d.add("a", max_retries=1, retry=c.RetryPolicy(base_ms=0, jitter_permille=0))
    t = d.claim_one(lease_ms=5_000)
    assert d.sm.next_timer_ms() == T0 + 5_000
    d.advance(4_999)
    assert t.state == "running"
    d.advance(1)
    assert t.state == "pending" and t.attempts[-1].outcome == "lease_expired"
    t2 = d.claim_one(lease_ms=5_000)
    assert t2.fencing_token == 2
    assert d.run(c.Complete, task_id="a", fencing_token=1).code == e.STALE_TOKEN
    d.advance(5_000)
    assert t.state == "dead_letter" and d.sm.next_timer_ms() == T0 + 10_000 + 7 * 86_400_000


def test_heartbeat_moves_the_expiry() -> None:
    d = Driver()
    d.add("a")
    t = d.claim_one(lease_ms=5_000)
    d.now += 4_000
    d.ok(c.Heartbeat, task_id="a", fencing_token=t.fencing_token, lease_ms=5_000)
    assert d.sm.next_timer_ms() == T0 + 9_000
    d.advance(1_000)
    assert t.state == "running"
    d.ok(c.Heartbeat, task_id="a", fencing_token=t.fencing_token, lease_ms=1_000)  # shorter
    assert d.sm.next_timer_ms() == T0 + 6_000
    d.advance(1_000)
    assert t.state == "pending"


def test_task_timeout() -> None:
    d = Driver()
    d.add("a", timeout_ms=10_000, max_retries=0)
    t = d.claim_one(lease_ms=60_000)
    assert d.sm.next_timer_ms() == T0 + 10_000
    d.advance(10_000)
    assert t.state == "dead_letter" and t.attempts[-1].outcome == "timed_out"


def test_expiry_of_cancel_requested_task_cancels() -> None:
    d = Driver()
    d.add("a", max_retries=3)
    t = d.claim_one(lease_ms=5_000)
    d.ok(c.Cancel, task_id="a")
    d.advance(5_000)
    assert t.state == "cancelled" and t.attempts[-1].outcome == "cancelled"


# --- release, cancel, replay, discard -------------------------------------------------------------

def test_release_keeps_the_retry_budget() -> None:
    d = Driver()
    d.add("a", max_retries=0)
    t = d.claim_one()
    d.ok(c.Release, task_id="a", fencing_token=t.fencing_token)
    assert t.state == "pending" and t.failures == 0 and t.attempts[-1].outcome == "released"
    assert d.ok(c.Release, task_id="a", fencing_token=t.fencing_token)["task"] is t
    t = d.claim_one()
    assert t.attempt == 2
    assert d.run(c.Release, task_id="a", fencing_token=1).code == e.STALE_TOKEN


def test_cancel_rules() -> None:
    d = Driver()
    d.add("a")
    d.ok(c.Cancel, task_id="a")
    assert d.sm.get_task("a").state == "cancelled" and d.claim() == []
    assert d.run(c.Cancel, task_id="a").code == e.INVALID_STATE
    assert d.run(c.Cancel, task_id="zz").code == e.NOT_FOUND
    d.add("b", tenant="beta")
    assert d.run(c.Cancel, task_id="b", tenant="acme").code == e.NOT_FOUND


def test_replay_and_discard() -> None:
    d = Driver()
    d.add("a", max_retries=0)
    t = d.claim_one()
    assert d.run(c.Replay, task_id="a").code == e.INVALID_STATE
    assert d.run(c.Discard, task_id="a").code == e.INVALID_STATE
    d.ok(c.Fail, task_id="a", fencing_token=t.fencing_token)
    d.now += 100
    d.ok(c.Replay, task_id="a")
    assert (t.state, t.run_at_ms, t.failures, t.completed_at_ms) == ("pending", T0 + 100, 0, None)
    t = d.claim_one()
    d.ok(c.Fail, task_id="a", fencing_token=t.fencing_token, retryable=False)
    d.now += 50
    kept = d.ok(c.Discard, task_id="a")["task"]
    # kept for audit, attempts and all; retention counts from the discard
    assert kept is d.sm.get_task("a") and kept.state == "discarded"
    assert len(kept.attempts) == 2 and kept.completed_at_ms == T0 + 150
    assert d.run(c.Discard, task_id="a").code == e.INVALID_STATE
    d.now += d.sm.limits.retention_ms
    d.ok(c.Tick)
    assert d.sm.get_task("a") is None                       # evicted like any terminal task


def test_replay_respects_tenant_limit() -> None:
    d = Driver(Limits(live_tasks_per_tenant_max=1))
    d.add("a", max_retries=0)
    t = d.claim_one()
    d.ok(c.Fail, task_id="a", fencing_token=t.fencing_token)
    d.add("b")
    assert d.run(c.Replay, task_id="a").code == e.TENANT_LIMIT


# --- retention -------------------------------------------------------------------------------------

def test_retention_evicts_old_terminal_tasks() -> None:
    d = Driver(Limits(retention_ms=10_000))
    d.add("a"), d.add("b")
    d.ok(c.Cancel, task_id="a")
    d.now += 5_000
    d.ok(c.Cancel, task_id="b")
    assert d.sm.next_timer_ms() == T0 + 10_000
    d.tick(T0 + 10_000)
    assert d.sm.get_task("a") is None and d.sm.get_task("b") is not None
    d.tick(T0 + 15_000)
    assert d.sm.tasks == {} and d.sm.next_timer_ms() is None


def test_terminal_count_limit_evicts_oldest_first() -> None:
    d = Driver(Limits(terminal_tasks_max=2, evictions_per_tick_max=1))
    for name in "abcd":
        d.add(name)
        d.ok(c.Cancel, task_id=name)
        d.now += 1
    assert d.sm.next_timer_ms() == d.sm.now_ms          # over the limit: due now
    d.tick()
    assert sorted(d.sm.tasks) == ["b", "c", "d"]        # bounded work per tick
    d.tick()
    assert sorted(d.sm.tasks) == ["c", "d"] and d.sm.next_timer_ms() > d.sm.now_ms


def test_apply_batch_counts_seq() -> None:
    sm = StateMachine()
    results = sm.apply_batch([c.Barrier(request_id="b", now_ms=5), c.Tick(request_id="t", now_ms=7)])
    assert [r.code for r in results] == ["ok", "ok"] and sm.seq == 1 and sm.now_ms == 7
    assert sm.apply_batch("junk") == [] and sm.seq == 2


def test_low_priority_submits_are_shed_above_the_threshold_and_high_ones_go_in() -> None:
    # live_tasks_max 10, shed above 0.5: from 5 live tasks, priorities 6..10 are shed
    d = Driver(Limits(live_tasks_max=10, shed_above_permille=500, shed_priority_above=5))
    for i in range(5):
        d.add(f"low{i}", priority=9)                      # below the threshold: admitted
    shed = d.submit("low5", priority=6)
    assert shed.code == e.OVERLOADED and "low5" not in d.sm.tasks
    assert shed.details == {"live": 5, "shed_above": 5, "priority": 6}
    for i in range(5):
        d.add(f"high{i}", priority=5)                     # priority <= 5: up to the hard limit
    assert d.submit("high5", priority=0).code == e.TENANT_LIMIT
    t = d.claim_one()                                    # running still counts as live
    d.ok(c.Complete, task_id=t.task_id, fencing_token=t.fencing_token)
    assert d.submit("low6", priority=10).code == e.OVERLOADED    # 9 live, still above 5


def test_a_capacity_refusal_is_not_recorded_so_its_retry_is_decided_afresh() -> None:
    # live_tasks_max 2, shed from 1 live task: a shed submit and a limit refusal leave no
    # row in the request table, and the same request ids go in once there is room
    d = Driver(Limits(live_tasks_max=2, shed_above_permille=500, shed_priority_above=5))
    d.add("a", priority=0)
    rows_before = len(d.sm.requests)
    shed = d.run(c.SubmitTask, request_id="retry-me", task_id="low", tenant="acme",
                 task_type="email", priority=9)
    d.add("b", priority=0)
    full = d.run(c.SubmitTask, request_id="full", task_id="c", tenant="acme",
                 task_type="email", priority=0)
    assert (shed.code, full.code) == (e.OVERLOADED, e.TENANT_LIMIT)
    assert len(d.sm.requests) == rows_before + 1        # only b's submit was recorded
    assert "retry-me" not in d.sm.requests and "full" not in d.sm.requests
    for _ in range(2):                                   # finish a and b: room again
        t = d.claim_one()
        d.ok(c.Complete, task_id=t.task_id, fencing_token=t.fencing_token)
    again = d.run(c.SubmitTask, request_id="retry-me", task_id="low", tenant="acme",
                  task_type="email", priority=9)
    assert again.ok and d.sm.tasks["low"].state == "pending"
    repeat = d.run(c.SubmitTask, request_id="retry-me", task_id="low", tenant="acme",
                   task_type="email", priority=9)
    assert repeat == again                               # now recorded: answered, not re-applied
