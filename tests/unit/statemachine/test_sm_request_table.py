"""Which commands the request table keeps: a successful Complete is not recorded, because
repeating it already gives the same answer and changes nothing; a refused one is."""
from __future__ import annotations

from sm_support import Driver

from tsched.statemachine import Limits, codec
from tsched.statemachine import commands as c


def _visible(d: Driver, task_id: str) -> tuple:
    """The task as a reader sees it: its record, or None."""
    task = d.sm.tasks.get(task_id)
    return None if task is None else tuple(codec.task_record(task))


def test_a_repeated_completion_gets_the_same_answer_and_changes_nothing() -> None:
    d = Driver()
    d.add("t1")
    task = d.claim_one()
    cmd = c.Complete(request_id="done-1", now_ms=d.now, task_id="t1",
                     fencing_token=task.fencing_token, result_json="42")
    first = d.sm.apply(cmd)
    assert first.ok and "done-1" not in d.sm.requests       # nothing recorded
    record = _visible(d, "t1")
    d.now += 5_000
    d.tick()                                               # time passes, other commands
    d.add("t2")
    again = d.sm.apply(c.Complete(request_id="done-1", now_ms=d.now, task_id="t1",
                                  fencing_token=task.fencing_token, result_json="42"))
    assert (again.code, again.value["task"].task_id) == (first.code, "t1")
    assert again.value["task"].result_json == "42"
    assert _visible(d, "t1") == record


def test_the_repeat_changes_no_state_at_all() -> None:
    d = Driver()
    d.add("t1")
    task = d.claim_one()
    cmd = c.Complete(request_id="done-1", now_ms=d.now, task_id="t1",
                     fencing_token=task.fencing_token)
    d.sm.apply(cmd)
    before = d.sm.state_digest()
    assert d.sm.apply(cmd).ok
    assert d.sm.state_digest() == before and "done-1" not in d.sm.requests


def test_a_repeat_after_eviction_is_not_found_as_a_recorded_answer_would_be() -> None:
    d = Driver(limits=Limits(terminal_tasks_max=1, retention_ms=60_000))
    d.add("t1")
    task = d.claim_one()
    cmd = c.Complete(request_id="done-1", now_ms=d.now, task_id="t1",
                     fencing_token=task.fencing_token)
    assert d.sm.apply(cmd).ok
    d.advance(120_000)                                     # retention evicts t1
    assert "t1" not in d.sm.tasks
    assert d.sm.apply(cmd).code == "not_found"


def test_a_refused_completion_is_recorded_and_repeats_its_answer() -> None:
    d = Driver()
    d.add("t1")
    task = d.claim_one()
    future = task.fencing_token + 1                        # no worker holds it (yet)
    cmd = c.Complete(request_id="early", now_ms=d.now, task_id="t1", fencing_token=future)
    assert d.sm.apply(cmd).code == "stale_token"
    assert "early" in d.sm.requests
    d.ok(c.Release, task_id="t1", fencing_token=task.fencing_token)
    again = d.claim_one()
    assert again.fencing_token == future                   # now it would be accepted...
    assert d.sm.apply(cmd).code == "stale_token"           # ...but the first answer stands
    assert d.sm.tasks["t1"].state == "running"


def test_other_token_checked_commands_are_still_recorded() -> None:
    d = Driver()
    d.add("t1")
    task = d.claim_one()
    d.ok(c.Heartbeat, request_id="hb", task_id="t1", fencing_token=task.fencing_token)
    d.ok(c.Fail, request_id="fl", task_id="t1", fencing_token=task.fencing_token, error="e")
    assert "hb" in d.sm.requests and "fl" in d.sm.requests
