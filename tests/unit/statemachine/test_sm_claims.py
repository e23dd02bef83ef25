"""Claim selection: order, aging, fair share, caps, prefetch, and the cheap peeks."""
from __future__ import annotations

from sm_support import T0, Driver

from tsched.statemachine import Limits
from tsched.statemachine import commands as c


def ids(tasks) -> list[str]:
    return [t.task_id for t in tasks]


def test_order_priority_then_run_at_then_submission() -> None:
    d = Driver()
    d.add("late", priority=5, run_at_ms=T0 - 10)
    d.add("p1", priority=1)
    d.add("early", priority=5, run_at_ms=T0 - 20)
    d.add("same1", priority=5, run_at_ms=T0 - 10)
    assert ids(d.claim(max_tasks=10)) == ["p1", "early", "late", "same1"]


def test_future_tasks_wait_for_their_time() -> None:
    d = Driver()
    d.add("f", run_at_ms=T0 + 1_000)
    assert d.claim() == [] and d.sm.next_due_ms(("email",)) == T0 + 1_000
    d.now += 1_000
    assert ids(d.claim()) == ["f"]


def test_only_requested_types_and_tenant_scope() -> None:
    d = Driver()
    d.add("a", task_type="sms", tenant="x")
    d.add("b", task_type="email", tenant="y")
    d.add("c", task_type="sms", tenant="y")
    assert ids(d.claim(task_types=["sms"], tenant="y")) == ["c"]
    assert ids(d.claim(task_types=["push"])) == []
    assert ids(d.claim(task_types=["sms", "sms"])) == ["a"]


def test_aging_lets_low_priority_overtake() -> None:
    d = Driver()   # aging 600 s: waiting 10 intervals gains 10 levels
    d.add("old_low", priority=10, run_at_ms=T0 - 6_000_000)
    d.add("new_high", priority=1)
    assert ids(d.claim()) == ["old_low"]
    d2 = Driver()
    d2.add("half_aged", priority=10, run_at_ms=T0 - 3_000_000)   # effective 5
    d2.add("p4", priority=4)
    assert ids(d2.claim()) == ["p4"]


def test_fair_share_between_tenants_at_same_priority() -> None:
    d = Driver()
    for i in range(6):
        d.add(f"a{i}", tenant="a", run_at_ms=T0 - 100 + i)
        d.add(f"b{i}", tenant="b", run_at_ms=T0 - 50 + i)   # later run_at than all of a's
    got = [t.tenant for t in d.claim(max_tasks=6)]
    assert got == ["a", "b", "a", "b", "a", "b"]


def test_weights_share_in_proportion() -> None:
    d = Driver()
    d.ok(c.SetTenant, tenant="heavy", weight=3)
    for _ in range(40):
        d.add(tenant="heavy")
        d.add(tenant="light")
    got = [t.tenant for t in d.claim(max_tasks=40)]
    assert got.count("heavy") == 30 and got.count("light") == 10


def test_fair_share_never_beats_priority() -> None:
    d = Driver()
    d.add("a_hi", tenant="a", priority=0)
    d.claim()                                  # a has more service now
    d.add("a_hi2", tenant="a", priority=0)
    d.add("b_lo", tenant="b", priority=9)
    assert ids(d.claim()) == ["a_hi2"]


def test_tenant_cap_holds_and_frees() -> None:
    d = Driver()
    d.ok(c.SetTenant, tenant="a", max_running=2)
    for i in range(5):
        d.add(f"a{i}", tenant="a")
    d.add("b0", tenant="b", priority=9)
    got = d.claim(max_tasks=10)
    assert ids(got) == ["a0", "a1", "b0"]
    assert not d.sm.has_claimable(("email",), None, 0, d.now)
    d.ok(c.Complete, task_id="a0", fencing_token=got[0].fencing_token)
    assert d.sm.has_claimable(("email",), None, 0, d.now)
    assert ids(d.claim(max_tasks=10)) == ["a2"]
    d.ok(c.SetTenant, tenant="a", max_running=0)     # unlimited again
    assert ids(d.claim(max_tasks=10)) == ["a3", "a4"]
    view = d.sm.get_tenant("a")
    assert (view.running, view.pending, view.max_running, view.weight) == (4, 0, 0, 1)


def test_set_tenant_validation() -> None:
    d = Driver()
    for fields in ({"weight": 0}, {"weight": 1001}, {"max_running": -1}, {"tenant": ""}):
        assert d.run(c.SetTenant, **{"tenant": "a", **fields}).code == "invalid_argument"
    assert d.sm.get_tenant("a") is None
    d.ok(c.SetTenant, tenant="b", weight=5)
    assert [v.tenant for v in d.sm.list_tenants()] == ["b"]


def test_prefetch_hands_out_due_soon_tasks_after_due_ones() -> None:
    d = Driver()
    d.add("soon2", run_at_ms=T0 + 800)
    d.add("soon1", run_at_ms=T0 + 300, priority=9)
    d.add("later", run_at_ms=T0 + 1_500)
    d.add("due", priority=9)
    assert d.claim(prefetch_ms=0, max_tasks=5)[0].task_id == "due"
    assert not d.sm.has_claimable(("email",), None, 0, d.now)
    assert d.sm.has_claimable(("email",), None, 500, d.now)
    got = d.claim(prefetch_ms=1_000, max_tasks=5, lease_ms=10_000)
    assert ids(got) == ["soon1", "soon2"]
    assert (got[0].started_at_ms, got[0].lease_expires_at_ms) == (T0 + 300, T0 + 10_300)


def test_claim_tokens_increase_across_claims() -> None:
    d = Driver()
    for _ in range(5):
        d.add()
    tokens = [t.fencing_token for _ in range(5) for t in d.claim()]
    assert tokens == [1, 2, 3, 4, 5]


def test_repeated_claim_request_returns_same_tasks() -> None:
    d = Driver()
    d.add("a"), d.add("b")
    first = d.run(c.Claim, request_id="cl", worker_id="w", task_types=("email",))
    again = d.run(c.Claim, request_id="cl", worker_id="w", task_types=("email",))
    assert ids(first.value["tasks"]) == ids(again.value["tasks"]) == ["a"]
    assert d.sm.get_task("b").state == "pending"


def test_cancelled_tasks_do_not_block_peeks() -> None:
    d = Driver()
    d.add("a"), d.add("b", run_at_ms=T0 + 5_000)
    d.ok(c.Cancel, task_id="a"), d.ok(c.Cancel, task_id="b")
    assert not d.sm.has_claimable(("email",), None, 1_000, d.now)
    assert d.sm.next_due_ms(("email",)) is None


def test_list_tasks_pages_newest_first_with_filters() -> None:
    d = Driver()
    for i in range(2_500):
        d.add(f"t{i}", tenant="a" if i % 2 else "b", task_type="x" if i % 3 else "y")
    for i in range(0, 2_500, 5):
        d.ok(c.Cancel, task_id=f"t{i}")
    seen, cursor = [], None
    while True:
        page, cursor = d.sm.list_tasks(state="cancelled", tenant="b", cursor=cursor, limit=40)
        seen += page
        if cursor is None:
            break
    expected = [f"t{i}" for i in range(2_495, -1, -5) if i % 2 == 0]
    assert ids(seen) == expected
    page, cursor = d.sm.list_tasks(task_type="y", limit=3)
    assert ids(page) == ["t2499", "t2496", "t2493"] and cursor == str(page[-1].seq)
    assert d.sm.list_tasks(tenant="nobody") == ([], None)


def test_list_tasks_rejects_bad_cursor() -> None:
    d = Driver()
    for cursor in ("abc", "-1", 5, "9" * 30):
        try:
            d.sm.list_tasks(cursor=cursor)
        except ValueError:
            continue
        raise AssertionError(f"cursor {cursor!r} accepted")


def test_stats_counts() -> None:
    d = Driver()
    d.add(priority=1), d.add(priority=1), d.add(priority=7)
    d.claim()
    s = d.sm.stats()
    assert s["tasks_by_state"]["pending"] == 2 and s["tasks_by_state"]["running"] == 1
    assert s["pending_by_priority"][1] == 1 and s["pending_by_priority"][7] == 1
    assert s["tenants"] == {"acme": {"pending": 2, "running": 1}}


def test_small_limits_apply() -> None:
    d = Driver(Limits(claim_tasks_max=2))
    assert d.run(c.Claim, worker_id="w", task_types=("e",), max_tasks=3).code == \
        "invalid_argument"
