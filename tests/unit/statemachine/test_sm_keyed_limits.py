"""Keyed rate and concurrency limits in the state machine (ratelimits.py, issue 46)."""
from __future__ import annotations

import json

from tsched.statemachine import Limits, StateMachine, codec
from tsched.statemachine import commands as c
from tsched.statemachine.errors import CONFLICT, INVALID_ARGUMENT, NOT_FOUND, TENANT_LIMIT
from tsched.statemachine.reshard import reshard

from sm_support import T0, Driver


def _limit(d: Driver, name: str = "partner", **fields) -> None:
    d.ok(c.PutLimit, name=name, **fields)


def _ids(tasks) -> list[str]:
    return [t.task_id for t in tasks]


def test_unknown_limit_is_refused_naming_it() -> None:
    d = Driver()
    r = d.submit(limits=("nope",))
    assert r.code == INVALID_ARGUMENT and "nope" in r.message
    assert r.details["limit"] == "nope"


def test_limit_definition_checks() -> None:
    d = Driver()
    assert d.run(c.PutLimit, name="x").code == INVALID_ARGUMENT   # neither bound
    assert d.run(c.PutLimit, name="x", rate=5, per_ms=0).code == INVALID_ARGUMENT
    _limit(d, "x", concurrency=2, partition_by="account_id")
    r = d.run(c.PutLimit, name="x", concurrency=3, partition_by="tenant")
    assert r.code == CONFLICT
    assert d.run(c.DeleteLimit, name="nope").code == NOT_FOUND
    small = Driver(Limits(limits_max=1))
    _limit(small, "a", rate=1)
    assert small.run(c.PutLimit, name="b", rate=1).code == TENANT_LIMIT


def test_rate_window_is_sliding() -> None:
    d = Driver()
    _limit(d, rate=2, per_ms=1_000)
    for _ in range(5):
        d.add(limits=("partner",))
    assert len(d.claim(max_tasks=10)) == 2
    d.now += 999
    assert d.claim(max_tasks=10) == []          # both starts still inside (now-1000, now]
    t = d.sm.get_task("t3")
    why = d.sm.store.limiter.limited_by(t, d.now)
    assert why == ("partner", "", T0 + 1_000)
    d.now += 1
    assert len(d.claim(max_tasks=10)) == 2


def test_held_task_does_not_block_unlimited_ones() -> None:
    d = Driver()
    _limit(d, rate=1, per_ms=60_000)
    d.add(priority=0, limits=("partner",))
    d.add(priority=0, limits=("partner",))
    d.add(priority=9)
    got = d.claim(max_tasks=2)
    assert _ids(got) == ["t1", "t3"]             # t2 skipped, not failed, not counted
    t2 = d.sm.get_task("t2")
    assert t2.state == "pending" and t2.attempt == 0


def test_concurrency_by_payload_field() -> None:
    d = Driver()
    _limit(d, concurrency=2, partition_by="account_id")
    for n in range(6):
        d.add(payload_json=json.dumps({"account_id": n % 2}), limits=("partner",))
    got = d.claim(max_tasks=10)
    assert len(got) == 4                          # two per account
    done = got[0]
    d.ok(c.Complete, task_id=done.task_id, fencing_token=done.fencing_token)
    again = d.claim(max_tasks=10)
    assert len(again) == 1
    assert json.loads(again[0].payload_json) == json.loads(done.payload_json)


def test_pause_limit_returns_the_task_without_counting_the_attempt() -> None:
    d = Driver()
    _limit(d, rate=100, per_ms=1_000)
    d.add(limits=("partner",))
    d.add(limits=("partner",))
    t = d.claim_one()
    d.ok(c.PauseLimit, task_id=t.task_id, fencing_token=t.fencing_token, limit="partner",
         after_ms=2_000)
    t = d.sm.get_task(t.task_id)
    assert t.state == "pending" and t.attempt == 0
    assert t.attempts[-1].outcome == "rate_limited"
    assert d.claim(max_tasks=5) == []
    assert d.sm.next_timer_ms() == T0 + 2_000
    d.now += 2_000
    d.tick()
    assert len(d.claim(max_tasks=5)) == 2


def test_pause_needs_a_limit_of_the_task() -> None:
    d = Driver()
    _limit(d, rate=1)
    d.add()
    t = d.claim_one()
    r = d.run(c.PauseLimit, task_id=t.task_id, fencing_token=t.fencing_token,
              limit="partner", after_ms=1_000)
    assert r.code == INVALID_ARGUMENT


def test_limited_tasks_are_not_prefetched_but_unlimited_ones_are() -> None:
    d = Driver()
    _limit(d, rate=10)
    d.add(run_at_ms=T0 + 200, limits=("partner",))
    d.add(run_at_ms=T0 + 300)
    got = d.claim(max_tasks=5, prefetch_ms=500)
    assert _ids(got) == ["t2"]   # early dispatch passes over the limited task
    assert d.sm.get_task("t1").state == "pending"
    d.now += 200
    assert _ids(d.claim(max_tasks=5, prefetch_ms=500)) == ["t1"]


def test_delete_limit_releases_held_tasks() -> None:
    d = Driver()
    _limit(d, concurrency=1)
    d.add(limits=("partner",))
    d.add(limits=("partner",))
    assert len(d.claim(max_tasks=5)) == 1
    assert d.claim(max_tasks=5) == []
    d.ok(c.DeleteLimit, name="partner")
    assert _ids(d.claim(max_tasks=5)) == ["t2"]


def test_completion_releases_for_waiters_at_once() -> None:
    d = Driver()
    _limit(d, concurrency=1)
    d.add(limits=("partner",))
    d.add(limits=("partner",))
    t = d.claim_one()
    assert d.claim() == []                        # t2 held
    assert not d.sm.has_claimable(("email",), None, 0, d.now)
    d.ok(c.Complete, task_id=t.task_id, fencing_token=t.fencing_token)
    assert d.sm.has_claimable(("email",), None, 0, d.now)


def test_cancel_of_a_released_task_frees_its_place() -> None:
    d = Driver()
    _limit(d, concurrency=1)
    for _ in range(3):
        d.add(limits=("partner",))
    t = d.claim_one()
    assert d.claim() == []                        # t2, t3 held
    d.ok(c.Complete, task_id=t.task_id, fencing_token=t.fencing_token)   # t2 released
    d.ok(c.Cancel, task_id="t2")
    assert _ids(d.claim()) == ["t3"]


def test_idle_partitions_are_forgotten_and_bounded() -> None:
    d = Driver(Limits(limit_partitions_max=2))
    _limit(d, concurrency=1, partition_by="tenant")
    for tenant in ("a", "b", "c"):
        d.add(tenant=tenant, limits=("partner",))
    got = d.claim(max_tasks=5)
    assert len(got) == 2                          # the third tenant waits for room
    assert d.sm.store.limiter.limited_by(d.sm.get_task("t3"), d.now)[0] == "partner"
    d.ok(c.Complete, task_id=got[0].task_id, fencing_token=got[0].fencing_token)
    assert _ids(d.claim(max_tasks=5)) == ["t3"]
    assert len(d.sm.store.limiter.parts["partner"]) == 2


def test_snapshot_carries_limits_and_claims_alike() -> None:
    d = Driver()
    _limit(d, rate=3, per_ms=10_000, concurrency=2, partition_by="tenant")
    for n in range(8):
        d.add(tenant=f"t{n % 2}", limits=("partner",))
    d.claim(max_tasks=3)
    d.now += 100
    restored = StateMachine.restore(d.sm.snapshot())
    assert restored.state_digest() == d.sm.state_digest()
    assert restored.snapshot() == d.sm.snapshot()
    cmd = c.Claim(request_id="rc", now_ms=d.now, worker_id="w", task_types=("email",),
                  max_tasks=10)
    a, b = d.sm.apply(cmd), restored.apply(cmd)
    assert _ids(a.value["tasks"]) == _ids(b.value["tasks"])
    assert restored.get_task("t1").limits == ("partner",)


def test_submit_limits_round_trip_the_codec() -> None:
    cmd = c.SubmitTask(request_id="r", now_ms=T0, task_id="x", tenant="a", task_type="t",
                       limits=("p", "q"))
    assert codec.decode_batch(codec.encode_batch([cmd]))[0] == cmd
    plain = c.SubmitTask(request_id="r", now_ms=T0, task_id="x", tenant="a", task_type="t")
    assert codec.decode_batch(codec.encode_batch([plain]))[0] == plain


def test_reshard_carries_tenant_limits_and_refuses_others() -> None:
    d = Driver()
    _limit(d, concurrency=1, partition_by="tenant")
    d.add(tenant="a", limits=("partner",))
    d.add(tenant="b", limits=("partner",))
    d.claim(max_tasks=5)
    blobs = reshard([d.sm.snapshot()], 2, lambda tenant: 0 if tenant == "a" else 1)
    shards = [StateMachine.restore(b) for b in blobs]
    for sm, tenant in zip(shards, ("a", "b")):
        assert "partner" in sm.store.limiter.defs
        assert list(sm.store.limiter.parts["partner"]) == [tenant]
    _limit(d, "global", rate=5)
    try:
        reshard([d.sm.snapshot()], 2, lambda tenant: 0)
    except codec.DecodeError as exc:
        assert "global" in str(exc)
    else:
        raise AssertionError("an unpartitioned limit was resharded")


def test_a_freed_window_releases_its_whole_budget() -> None:
    d = Driver()
    _limit(d, rate=3, per_ms=1_000)
    for _ in range(7):
        d.add(limits=("partner",))
    assert len(d.claim(max_tasks=10)) == 3        # three starts at one instant
    assert d.claim(max_tasks=10) == []            # four held
    d.now += 1_000
    assert _ids(d.claim(max_tasks=10)) == ["t4", "t5", "t6"]


def test_a_task_held_by_its_second_limit_lets_its_first_go_to_another() -> None:
    d = Driver()
    _limit(d, "a", concurrency=1)
    _limit(d, "b", concurrency=1)
    d.add(limits=("b",))
    assert len(d.claim()) == 1                    # b is now spent
    d.add(limits=("a", "b"))                      # t2: a has room, b not
    d.add(limits=("a",))                          # t3: only a
    assert _ids(d.claim(max_tasks=5)) == ["t3"]


def test_a_window_spent_by_released_tasks_is_watched_again() -> None:
    """Released tasks that spend the window again leave others held: the next window edge
    must release them without any other command (found on a cluster: held for good)."""
    d = Driver()
    _limit(d, rate=1, per_ms=700)
    for _ in range(3):
        d.add(limits=("partner",))
    assert _ids(d.claim(max_tasks=5)) == ["t1"]   # t2, t3 held
    d.now += 700
    assert _ids(d.claim(max_tasks=5)) == ["t2"]   # t3 held, the window spent again
    assert d.sm.next_timer_ms() == T0 + 1_400
    d.now += 700
    assert _ids(d.claim(max_tasks=5)) == ["t3"]


def test_partition_by_a_dotted_path_reaches_into_the_payload() -> None:
    d = Driver()
    _limit(d, concurrency=1, partition_by="kwargs.account_id")
    for account in ("a", "a", "b"):
        d.add(payload_json=json.dumps({"args": [], "kwargs": {"account_id": account}}),
              limits=("partner",))
    assert _ids(d.claim(max_tasks=5)) == ["t1", "t3"]


def test_a_task_a_hold_releases_mid_claim_is_answered_in_claim_order() -> None:
    """c is released when the window frees, then held under its other, full limit; that
    hold leaves the window's budget to d, the next held task, which a second round of the
    same claim grants. e, unlimited and younger than d, came in the first round: the
    answer still lists d first (found by the keyed-limits property test)."""
    d = Driver()
    _limit(d, "slots", concurrency=1)
    _limit(d, "window", rate=1, per_ms=700)
    d.add("a", limits=("slots",))
    d.add("b", limits=("window",))
    assert _ids(d.claim(max_tasks=2)) == ["a", "b"]   # slots full, the window spent
    d.add("c", limits=("window", "slots"))
    d.add("d", limits=("window",))
    assert d.claim(max_tasks=2) == []                 # both held under the window
    d.add("e")
    d.now += 700                                      # b's start leaves the window
    assert _ids(d.claim(max_tasks=2)) == ["d", "e"]
    assert d.sm.get_task("c").state == "pending"


def test_budget_a_released_task_could_not_use_goes_to_the_next_held_task() -> None:
    """t0 and t1 wait under `slots`; when its slot frees, t0 (the better) goes back to the
    queue, but the claim finds `other` full and holds t0 there. The slot goes to t1, held
    before t2 was submitted, not to t2 (found by the keyed-limits property test)."""
    d = Driver()
    _limit(d, "slots", concurrency=1)
    _limit(d, "other", concurrency=1)
    d.add("r", limits=("slots",))
    d.add("s", limits=("other",))
    assert _ids(d.claim(max_tasks=2)) == ["r", "s"]
    d.add("t0", limits=("slots", "other"))
    d.add("t1", limits=("slots",))
    assert d.claim(max_tasks=2) == []                  # both held under slots
    r = d.sm.get_task("r")
    d.ok(c.Complete, task_id="r", fencing_token=r.fencing_token)   # the slot frees
    d.add("t2", limits=("slots",))
    assert _ids(d.claim(max_tasks=2)) == ["t1"]
    assert d.sm.store.limiter.limited_by(d.sm.get_task("t2"), d.now)[0] == "slots"
