"""Schedules: records, fires, dedup of repeated fires, misfire and overlap policies."""
from __future__ import annotations

import pytest
from sm_support import T0, Driver

from tsched.statemachine import Limits
from tsched.statemachine import commands as c
from tsched.statemachine.rules import occurrence_task_id

MIN = 60_000


def put(d: Driver, sid: str = "s1", tenant: str = "acme", **fields):
    fields.setdefault("next_fire_ms", T0 + MIN)
    fields.setdefault("template", c.TaskTemplate(task_type="report", priority=2))
    fields.setdefault("cron", "* * * * *")
    return d.run(c.PutSchedule, tenant=tenant, schedule_id=sid, **fields)


def fire(d: Driver, fire_ms: int, next_fire_ms: int | None = None, sid: str = "s1", **kw):
    return d.ok(c.Fire, tenant="acme", schedule_id=sid, fire_ms=fire_ms,
                next_fire_ms=fire_ms + MIN if next_fire_ms is None else next_fire_ms, **kw)


def outcomes(d: Driver, sid: str = "s1") -> list[str]:
    return [f.outcome for f in d.sm.get_schedule("acme", sid).fires]


def test_put_and_fire_creates_an_occurrence() -> None:
    d = Driver()
    s = put(d).value["schedule"]
    assert d.sm.next_fire_ms() == T0 + MIN and d.sm.due_fires(T0) == []
    assert d.sm.due_fires(T0 + MIN) == [("acme", "s1", T0 + MIN)]
    d.now = T0 + MIN
    value = fire(d, T0 + MIN)
    task = value["task"]
    assert task.task_id == occurrence_task_id("acme", "s1", T0 + MIN, False)
    assert (task.schedule_id, task.run_at_ms, task.priority, task.task_type) == \
        ("s1", T0 + MIN, 2, "report")
    assert s.next_fire_ms == T0 + 2 * MIN and outcomes(d) == ["ran"]
    assert d.sm.due_fires(T0 + MIN) == [] and d.sm.next_fire_ms() == T0 + 2 * MIN
    assert d.sm.list_tasks(schedule_id="s1")[0] == [task]


def test_repeated_fire_creates_nothing() -> None:
    d = Driver(now_ms=T0 + MIN)
    put(d)
    fire(d, T0 + MIN)
    again = fire(d, T0 + MIN)
    assert again["task"] is None and len(d.sm.tasks) == 1 and outcomes(d) == ["ran"]


def test_jitter_is_deterministic_and_bounded() -> None:
    d = Driver(now_ms=T0 + MIN)
    put(d, jitter_ms=30_000)
    task = fire(d, T0 + MIN)["task"]
    assert T0 + MIN <= task.run_at_ms <= T0 + MIN + 30_000
    d2 = Driver(now_ms=T0 + MIN)
    put(d2, jitter_ms=30_000)
    assert fire(d2, T0 + MIN)["task"].run_at_ms == task.run_at_ms


def test_misfire_outside_catchup_window_is_missed() -> None:
    d = Driver(now_ms=T0 + MIN + 61_000)
    put(d, catchup_window_ms=60_000)
    assert fire(d, T0 + MIN)["task"] is None and outcomes(d) == ["missed"]
    assert d.sm.get_schedule("acme", "s1").next_fire_ms == T0 + 2 * MIN


def test_late_fire_inside_window_runs() -> None:
    d = Driver(now_ms=T0 + MIN + 30_000)
    put(d)
    assert fire(d, T0 + MIN)["task"] is not None and outcomes(d) == ["ran"]


def test_misfire_skip_skips_late_fires() -> None:
    d = Driver(now_ms=T0 + MIN + 1_001)
    put(d, misfire="skip")
    assert fire(d, T0 + MIN)["task"] is None and outcomes(d) == ["skipped"]
    d.now = T0 + 2 * MIN + 1_000
    assert fire(d, T0 + 2 * MIN)["task"] is not None


def test_overlap_skip() -> None:
    d = Driver(now_ms=T0 + MIN)
    put(d, overlap="skip")
    first = fire(d, T0 + MIN)["task"]
    d.now = T0 + 2 * MIN
    assert fire(d, T0 + 2 * MIN)["task"] is None
    d.ok(c.Cancel, task_id=first.task_id)
    d.now = T0 + 3 * MIN
    assert fire(d, T0 + 3 * MIN)["task"] is not None
    assert outcomes(d) == ["ran", "skipped", "ran"]


def test_overlap_buffer_one() -> None:
    d = Driver(now_ms=T0 + MIN)
    put(d, overlap="buffer_one", template=c.TaskTemplate(task_type="email"))
    fire(d, T0 + MIN)
    d.claim_one()                                   # one running
    d.now = T0 + 2 * MIN
    assert fire(d, T0 + 2 * MIN)["task"] is not None    # buffered beside it
    d.now = T0 + 3 * MIN
    assert fire(d, T0 + 3 * MIN)["task"] is None        # a second pending one: skipped
    assert outcomes(d) == ["ran", "ran", "skipped"]


def test_overlap_allow() -> None:
    d = Driver(now_ms=T0 + 3 * MIN)
    put(d, catchup_window_ms=10 * MIN)
    for k in (1, 2, 3):
        assert fire(d, T0 + k * MIN)["task"] is not None
    assert len(d.sm.tasks) == 3


def test_pause_resume() -> None:
    d = Driver(now_ms=T0 + MIN)
    put(d)
    d.ok(c.PauseSchedule, tenant="acme", schedule_id="s1")
    assert d.sm.due_fires(T0 + 10 * MIN) == [] and d.sm.next_fire_ms() is None
    assert fire(d, T0 + MIN)["task"] is None and outcomes(d) == []
    assert d.run(c.Fire, tenant="acme", schedule_id="s1", fire_ms=d.now, next_fire_ms=None,
                 manual=True).code == "invalid_state"
    d.ok(c.ResumeSchedule, tenant="acme", schedule_id="s1", next_fire_ms=T0 + 5 * MIN)
    assert d.sm.next_fire_ms() == T0 + 5 * MIN


def test_manual_trigger_does_not_advance() -> None:
    d = Driver(now_ms=T0 + 30_000)
    put(d)
    value = d.ok(c.Fire, tenant="acme", schedule_id="s1", fire_ms=d.now, next_fire_ms=None,
                 manual=True)
    assert value["task"].task_id == occurrence_task_id("acme", "s1", d.now, True)
    assert value["schedule"].next_fire_ms == T0 + MIN


def test_a_shard_fire_names_its_shard_in_the_occurrence_id() -> None:
    d = Driver(now_ms=T0 + 30_000)
    put(d)
    value = d.ok(c.Fire, tenant="acme", schedule_id="s1", fire_ms=d.now, next_fire_ms=None,
                 manual=True, shard=10)
    unsharded = occurrence_task_id("acme", "s1", d.now, True)
    assert value["task"].task_id == "s0a-" + unsharded[2:]
    assert d.run(c.Fire, tenant="acme", schedule_id="s1", fire_ms=d.now, next_fire_ms=None,
                 manual=True, shard=256).code == "invalid_argument"


def test_replace_keeps_history_and_delete() -> None:
    d = Driver(now_ms=T0 + MIN)
    put(d)
    fire(d, T0 + MIN)
    s = put(d, cron="*/5 * * * *", next_fire_ms=T0 + 5 * MIN).value["schedule"]
    assert s.cron == "*/5 * * * *" and outcomes(d) == ["ran"] and s.created_at_ms == T0 + MIN
    gone = d.ok(c.DeleteSchedule, tenant="acme", schedule_id="s1")["schedule"]
    assert gone.schedule_id == "s1" and d.sm.get_schedule("acme", "s1") is None
    assert d.run(c.DeleteSchedule, tenant="acme", schedule_id="s1").code == "not_found"
    assert d.sm.due_fires(T0 + 99 * MIN) == []


def test_fire_history_is_bounded() -> None:
    d = Driver(now_ms=T0 + 30 * MIN)
    put(d, catchup_window_ms=60 * MIN)
    for k in range(1, 26):
        fire(d, T0 + k * MIN)
    fires = d.sm.get_schedule("acme", "s1").fires
    assert len(fires) == 20 and fires[-1].fire_ms == T0 + 25 * MIN
    assert fires[0].fire_ms == T0 + 6 * MIN and {f.outcome for f in fires} == {"ran"}


@pytest.mark.parametrize("fields", [
    {"overlap": "queue"}, {"misfire": "later"}, {"catchup_window_ms": -1},
    {"jitter_ms": 3_600_001}, {"cron": ""}, {"template": "x"},
    {"template": c.TaskTemplate(task_type="r", priority=12)},
    {"start_at_ms": 10, "end_at_ms": 5}, {"paused": "no"}, {"next_fire_ms": "soon"},
])
def test_put_schedule_validation(fields) -> None:
    d = Driver()
    assert put(d, **fields).code == "invalid_argument"
    assert d.sm.schedules == {}


def test_schedule_limits() -> None:
    d = Driver(Limits(schedules_per_tenant_max=2, schedules_max=3))
    assert put(d, "a").ok and put(d, "b").ok
    assert put(d, "c").code == "tenant_limit"
    assert put(d, "a").ok                           # replacing is fine
    assert put(d, "x", tenant="beta").ok
    assert put(d, "y", tenant="gamma").code == "tenant_limit"


def test_fire_validation_and_unknown_schedule() -> None:
    d = Driver()
    put(d)
    assert d.run(c.Fire, tenant="acme", schedule_id="s1", fire_ms=T0 + MIN,
                 next_fire_ms=T0 + MIN).code == "invalid_argument"
    assert d.run(c.Fire, tenant="acme", schedule_id="nope", fire_ms=T0,
                 next_fire_ms=None).code == "not_found"


def test_end_at_stops_the_schedule() -> None:
    d = Driver(now_ms=T0 + 2 * MIN)
    put(d, end_at_ms=T0 + MIN + 1)
    assert fire(d, T0 + MIN)["task"] is not None
    assert fire(d, T0 + 2 * MIN)["task"] is None
    assert d.sm.get_schedule("acme", "s1").next_fire_ms is None


def test_list_schedules_pages() -> None:
    d = Driver()
    for sid in ("c", "a", "b"):
        put(d, sid)
    put(d, "z", tenant="beta")
    page, cursor = d.sm.list_schedules(tenant="acme", limit=2)
    assert [s.schedule_id for s in page] == ["a", "b"]
    page, cursor = d.sm.list_schedules(tenant="acme", cursor=cursor, limit=2)
    assert [s.schedule_id for s in page] == ["c"] and cursor is None
    assert len(d.sm.list_schedules()[0]) == 4
