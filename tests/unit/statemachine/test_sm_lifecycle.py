"""The lifecycle table (statemachine/lifecycle.py), driven through commands: every row is
reached by a scenario and does what it says, and every (state, event) pair without a row
is refused for its state and changes nothing."""
from __future__ import annotations

import pytest
from sm_support import Driver

from tsched.statemachine import StateMachine, codec
from tsched.statemachine import commands as c
from tsched.statemachine.lifecycle import EVENTS, ROWS, TABLE
from tsched.statemachine.model import STATES

FAST = c.RetryPolicy(backoff="fixed", base_ms=1_000, max_ms=1_000, jitter_permille=0)
LEASE_MS = 1_000


def _key(state, event, new, *guards) -> tuple:
    return (state, event, new, guards)


def _row_key(row) -> tuple:
    return _key(row.state, row.event, row.new, *(g.__name__ for g in row.guards))


class Scene:
    """One task, one Driver: puts the task in a state and applies one event to it."""

    def __init__(self, max_retries: int = 1) -> None:
        self.d = Driver()
        self.task = self.d.add("t", max_retries=max_retries, retry=FAST)
        self.token = 0

    def claim(self) -> "Scene":
        self.token = self.d.claim_one(lease_ms=LEASE_MS).fencing_token
        return self

    def event(self, event: str, token: int | None = None, retryable: bool = True):
        """Apply `event` to the task; returns the command's result."""
        d, tok = self.d, self.token if token is None else token
        if event == "claim":
            return d.run(c.Claim, worker_id="w2", task_types=("email",), lease_ms=LEASE_MS)
        if event == "expire":
            return d.tick(d.now + LEASE_MS)
        ref = {"task_id": "t"}
        if event in ("heartbeat", "complete", "fail", "release"):
            ref["fencing_token"] = tok
        if event == "fail":
            ref.update(error="boom", retryable=retryable)
        command = {"heartbeat": c.Heartbeat, "complete": c.Complete, "fail": c.Fail,
                   "release": c.Release, "cancel": c.Cancel, "replay": c.Replay,
                   "discard": c.Discard}[event]
        return d.run(command, **ref)

    def ok(self, event: str, **kw) -> "Scene":
        result = self.event(event, **kw)
        assert result.ok, result
        return self

    @property
    def state(self) -> str | None:
        task = self.d.sm.get_task("t")
        return None if task is None else task.state


def _in(state: str) -> Scene:
    """A task in `state`, with a fencing token issued to it when it has been claimed."""
    if state == "pending":
        return Scene()
    if state == "running":
        return Scene().claim()
    if state == "completed":
        return Scene().claim().ok("complete")
    if state == "cancelled":
        return Scene().ok("cancel")
    dead = Scene(max_retries=0).claim().ok("fail", retryable=False)
    return dead.ok("discard") if state == "discarded" else dead      # dead_letter


# Each scenario sets up its row's guards, applies the event once and returns the Scene;
# the test checks the new state and that the row's event did (or, repeated, did not) act.
SCENARIOS = {
    _key("pending", "claim", "running"): lambda: Scene().claim(),
    _key("pending", "cancel", "cancelled"): lambda: Scene().ok("cancel"),
    _key("pending", "fail", "pending", "repeat"):
        lambda: Scene().claim().ok("fail").ok("fail"),
    _key("pending", "release", "pending", "repeat"):
        lambda: Scene().claim().ok("release").ok("release"),
    _key("running", "heartbeat", "running", "token"): lambda: Scene().claim().ok("heartbeat"),
    _key("running", "complete", "completed", "token"): lambda: Scene().claim().ok("complete"),
    _key("running", "fail", "cancelled", "token", "cancel_requested"):
        lambda: Scene().claim().ok("cancel").ok("fail"),
    _key("running", "fail", "dead_letter", "token", "not_retryable"):
        lambda: Scene().claim().ok("fail", retryable=False),
    _key("running", "fail", "pending", "token", "retries_left"):
        lambda: Scene(max_retries=1).claim().ok("fail"),
    _key("running", "fail", "dead_letter", "token"):
        lambda: Scene(max_retries=0).claim().ok("fail"),
    _key("running", "release", "cancelled", "token", "cancel_requested"):
        lambda: Scene().claim().ok("cancel").ok("release"),
    _key("running", "release", "pending", "token"): lambda: Scene().claim().ok("release"),
    _key("running", "expire", "cancelled", "cancel_requested"):
        lambda: Scene().claim().ok("cancel").ok("expire"),
    _key("running", "expire", "pending", "retries_left"):
        lambda: Scene(max_retries=1).claim().ok("expire"),
    _key("running", "expire", "dead_letter"): lambda: Scene(max_retries=0).claim().ok("expire"),
    _key("running", "cancel", "running"): lambda: Scene().claim().ok("cancel"),
    _key("completed", "complete", "completed", "repeat"):
        lambda: Scene().claim().ok("complete").ok("complete"),
    _key("cancelled", "fail", "cancelled", "repeat"):
        lambda: Scene().claim().ok("cancel").ok("fail").ok("fail"),
    _key("cancelled", "release", "cancelled", "repeat"):
        lambda: Scene().claim().ok("cancel").ok("release").ok("release"),
    _key("dead_letter", "fail", "dead_letter", "repeat"):
        lambda: _in("dead_letter").ok("fail", retryable=False),
    _key("dead_letter", "replay", "pending"): lambda: _in("dead_letter").ok("replay"),
    _key("discarded", "fail", "discarded", "repeat"):
        lambda: _in("discarded").ok("fail", retryable=False),
    _key("dead_letter", "discard", "discarded"): lambda: _in("dead_letter").ok("discard"),
}


def test_every_row_has_a_scenario_and_no_scenario_lacks_a_row() -> None:
    assert sorted(map(str, SCENARIOS)) == sorted(str(_row_key(r)) for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: repr(r))
def test_row_through_commands(row) -> None:
    scene = SCENARIOS[_row_key(row)]()
    assert scene.state == row.new
    task = scene.d.sm.get_task("t")
    attempts = list(task.attempts)
    if row.repeat:
        assert attempts[-1].outcome is not None and task.fencing_token == scene.token
    elif row.event == "cancel" and row.new == "running":
        assert task.cancel_requested and attempts[-1].outcome is None
    elif row.event in ("fail", "release", "expire", "complete"):
        assert attempts[-1].outcome is not None
    twin = StateMachine.restore(scene.d.sm.snapshot())
    assert twin.state_digest() == scene.d.sm.state_digest()


def test_a_repeated_report_changes_nothing() -> None:
    scene = Scene().claim().ok("fail")
    before = codec.task_record(scene.d.sm.get_task("t"))
    scene.d.now += 5_000
    scene.ok("fail")                             # a fresh request id, the same report
    assert codec.task_record(scene.d.sm.get_task("t")) == before


MISSING = [(s, e) for s in STATES for e in EVENTS if (s, e) not in TABLE]


@pytest.mark.parametrize("state, event", MISSING, ids=lambda v: str(v))
def test_missing_pair_is_refused_and_changes_nothing(state: str, event: str) -> None:
    scene = _in(state)
    task = scene.d.sm.get_task("t")
    before, attempts = task.state, len(task.attempts)
    tokens = [scene.token] if scene.token else []
    tokens += [task.fencing_token + 7]           # a token never issued to this task
    for token in tokens:
        result = scene.event(event, token=token)
        if event == "claim":
            assert result.ok and result.value["tasks"] == []
        elif event == "expire":
            assert result.ok
        elif event in ("complete", "fail", "release") or (
                event == "heartbeat" and token == scene.token):
            assert result.code == "stale_token", result
        else:
            assert result.code == "invalid_state", result
            assert result.details["state"] == state
        task = scene.d.sm.get_task("t")
        assert (task.state, len(task.attempts)) == (before, attempts)


def test_the_table_has_every_state_and_event() -> None:
    assert {r.state for r in ROWS} == set(STATES)
    assert {r.event for r in ROWS} == set(EVENTS)
