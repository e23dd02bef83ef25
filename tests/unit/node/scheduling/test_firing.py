"""firing.py: the leader's fire decisions, applied to a real StateMachine."""
from __future__ import annotations

import datetime as dt
import itertools

from tsched.node.scheduling import cron, firing
from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c

T0 = 1_800_000_000_000          # a whole minute (2027-01-15T08:00:00Z)
SEC = 1_000
MIN = 60_000
_ids = itertools.count()


def make(expr: str = "* * * * * *", zone: str = "UTC", *, misfire: str = "run_all",
         window_ms: int = 60_000, created_ms: int = T0, **fields) -> StateMachine:
    sm = StateMachine()
    spec = cron.parse(expr, zone, "s1")
    first = firing.next_in_window(spec, created_ms, fields.get("start_at_ms"),
                                  fields.get("end_at_ms"))
    result = sm.apply(c.PutSchedule(
        request_id=f"put-{next(_ids)}", now_ms=created_ms, tenant="acme", schedule_id="s1",
        cron=expr, timezone=zone, template=c.TaskTemplate(task_type="report"),
        misfire=misfire, catchup_window_ms=window_ms, next_fire_ms=first, **fields))
    assert result.ok, result
    return sm


def run(sm: StateMachine, now_ms: int, **kw) -> list[c.Fire]:
    cmds = firing.due_fire_commands(sm, now_ms, **kw)
    results = sm.apply_batch(cmds)
    assert all(r.ok for r in results), results
    return cmds


def sched(sm: StateMachine):
    return sm.get_schedule("acme", "s1")


def fires(sm: StateMachine) -> list[tuple[int, str]]:
    return [(f.fire_ms, f.outcome) for f in sched(sm).fires]


def task_run_ats(sm: StateMachine) -> list[int]:
    tasks, _ = sm.list_tasks(schedule_id="s1", limit=1000)
    return sorted(t.run_at_ms for t in tasks)


def test_on_time_fire_runs_once_and_advances():
    sm = make()
    assert firing.due_fire_commands(sm, T0 + 999) == []
    cmds = run(sm, T0 + SEC + 3)
    assert [(x.fire_ms, x.next_fire_ms) for x in cmds] == [(T0 + SEC, T0 + 2 * SEC)]
    assert fires(sm) == [(T0 + SEC, "ran")] and task_run_ats(sm) == [T0 + SEC]
    assert sched(sm).next_fire_ms == T0 + 2 * SEC
    assert run(sm, T0 + SEC + 500) == []          # nothing due twice


def test_run_all_catches_up_every_fire_of_a_short_outage():
    sm = make()
    run(sm, T0 + SEC)
    run(sm, T0 + 12 * SEC + 400)                   # no leader for 11 s
    assert task_run_ats(sm) == [T0 + k * SEC for k in range(1, 13)]
    assert {o for _, o in fires(sm)} == {"ran"}
    assert sched(sm).next_fire_ms == T0 + 13 * SEC


def test_run_all_records_fires_older_than_the_window_as_one_miss():
    sm = make(window_ms=10 * SEC)
    run(sm, T0 + 100 * SEC)                        # 100 s without a leader
    runs = task_run_ats(sm)
    assert runs == [T0 + k * SEC for k in range(90, 101)]   # the last 10 s, ends included
    assert fires(sm)[0] == (T0 + SEC, "missed")
    assert [o for _, o in fires(sm)].count("missed") == 1


def test_run_once_coalesces_missed_fires_into_one_run():
    sm = make(misfire="run_once")
    cmds = run(sm, T0 + 20 * SEC + 200)
    assert len(cmds) == 1
    assert task_run_ats(sm) == [T0 + SEC] and fires(sm) == [(T0 + SEC, "ran")]
    assert sched(sm).next_fire_ms == T0 + 21 * SEC


def test_run_once_past_the_window_misses_then_runs_the_first_young_fire():
    sm = make(misfire="run_once", window_ms=5 * SEC)
    run(sm, T0 + 20 * SEC + 200)
    assert fires(sm) == [(T0 + SEC, "missed"), (T0 + 16 * SEC, "ran")]
    assert sched(sm).next_fire_ms == T0 + 21 * SEC


def test_skip_skips_missed_fires_and_runs_the_current_one():
    sm = make(misfire="skip")
    run(sm, T0 + 20 * SEC + 200)
    assert fires(sm) == [(T0 + SEC, "skipped"), (T0 + 20 * SEC, "ran")]
    assert task_run_ats(sm) == [T0 + 20 * SEC]
    assert sched(sm).next_fire_ms == T0 + 21 * SEC


def test_skip_runs_nothing_when_even_the_latest_fire_is_late():
    sm = make("0 * * * * *", misfire="skip")
    run(sm, T0 + 3 * MIN + 30 * SEC)
    # T0+1min is past the 60 s window (missed); T0+3min is young but 30 s late (skipped).
    assert fires(sm) == [(T0 + MIN, "missed"), (T0 + 3 * MIN, "skipped")]
    assert task_run_ats(sm) == []


def test_work_per_call_is_bounded_and_the_next_call_continues():
    sm = make()
    now = T0 + 50 * SEC
    first = run(sm, now, max_fires=7)
    assert len(first) == 7 and sched(sm).next_fire_ms == T0 + 8 * SEC
    while run(sm, now, max_fires=7):
        pass
    assert task_run_ats(sm) == [T0 + k * SEC for k in range(1, 51)]


def test_end_at_stops_the_schedule():
    sm = make(end_at_ms=T0 + 3 * SEC)
    run(sm, T0 + 10 * SEC)
    assert task_run_ats(sm) == [T0 + SEC, T0 + 2 * SEC, T0 + 3 * SEC]
    assert sched(sm).next_fire_ms is None and sm.due_fires(T0 + 100 * SEC) == []


def test_start_at_delays_the_first_fire():
    sm = make(start_at_ms=T0 + 5 * SEC + 500)
    assert sched(sm).next_fire_ms == T0 + 6 * SEC
    run(sm, T0 + 6 * SEC)
    assert task_run_ats(sm) == [T0 + 6 * SEC]


def test_paused_schedule_gets_no_fires():
    sm = make()
    assert sm.apply(c.PauseSchedule(request_id="p", now_ms=T0, tenant="acme",
                                    schedule_id="s1")).ok
    assert firing.due_fire_commands(sm, T0 + 30 * SEC) == []


def test_fire_chain_follows_the_zone_across_spring_forward():
    ny_ms = int(dt.datetime(2026, 3, 7, 12, tzinfo=dt.timezone.utc).timestamp() * 1000)
    sm = make("30 2 * * *", "America/New_York", created_ms=ny_ms)
    transition_ms = int(dt.datetime(2026, 3, 8, 7, tzinfo=dt.timezone.utc).timestamp() * 1000)
    assert sched(sm).next_fire_ms == transition_ms      # 02:30 does not exist: fires at 03:00
    (cmd,) = run(sm, transition_ms + 10)
    assert cmd.next_fire_ms == transition_ms + 23 * 3600 * 1000 + 30 * MIN  # 02:30 EDT next day


def test_spec_cache_is_bounded_lru():
    cache = firing.SpecCache(size=2)
    a = cache.get("* * * * *", "UTC", "a")
    cache.get("* * * * *", "UTC", "b")
    assert cache.get("* * * * *", "UTC", "a") is a     # a is now the most recent
    cache.get("* * * * *", "UTC", "c")                 # evicts b
    assert len(cache) == 2 and cache.get("* * * * *", "UTC", "a") is a


def test_two_leaders_deciding_the_same_state_make_the_same_fires():
    one, two = make(), make()
    a = [(x.fire_ms, x.next_fire_ms) for x in firing.due_fire_commands(one, T0 + 5 * SEC)]
    b = [(x.fire_ms, x.next_fire_ms) for x in firing.due_fire_commands(two, T0 + 5 * SEC)]
    assert a == b and len(a) == 5


def test_a_long_catch_up_is_cut_at_the_default_bound():
    sm = make(window_ms=600 * SEC)
    cmds = firing.due_fire_commands(sm, T0 + 500 * SEC)
    assert len(cmds) == firing.FIRES_PER_CALL_MAX
    assert [x.fire_ms for x in cmds] == [T0 + k * SEC for k in range(1, len(cmds) + 1)]


def test_lead_proposes_a_fire_early_with_its_task_due_at_the_fire_time():
    sm = make()
    assert firing.due_fire_commands(sm, T0 + 600, lead_ms=300) == []
    cmds = run(sm, T0 + 700, lead_ms=300)
    assert [(x.fire_ms, x.next_fire_ms, x.now_ms) for x in cmds] == \
        [(T0 + SEC, T0 + 2 * SEC, T0 + 700)]
    assert fires(sm) == [(T0 + SEC, "ran")] and task_run_ats(sm) == [T0 + SEC]
