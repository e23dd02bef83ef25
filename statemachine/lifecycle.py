"""The task lifecycle: every state, every event, every guard, in one table.

Theory of operation
-------------------
A task is in one of six states. A command (or the clock) that acts on a task names an
*event*. `decide(task, event, token, retryable)` looks up the rows of `(task.state, event)`
in `TABLE` and returns the first whose guards all hold; the handler then makes the change
the row names (the new state, through `Store.move`, and the row's effects). It is the only
way a task changes state, and every handler goes through it.

    pending --claim--> running --complete--> completed
       ^                  |  \\--fail, expire (retries left) / release--> pending
       |                  |  \\--fail (not retryable or none left), expire--> dead_letter
       |                  \\--fail, release, expire (cancel requested)--> cancelled
       |--cancel--> cancelled
    dead_letter --replay--> pending ; dead_letter --discard--> discarded

    running --heartbeat--> running (lease renewed) ; running --cancel--> running
    (cancel requested: the lease is no longer renewed, the attempt's end cancels the task)

`completed`, `cancelled`, `dead_letter` and `discarded` are terminal: they carry
`completed_at_ms`, count towards retention, and only `dead_letter` has a way out (replay,
discard). `retrying` is not a state: it is how a pending task with failures reads
(reads.py), so no row names it.

Guards (each a predicate of the task and the command, below):
- `token`: the command carries the task's current fencing token (it holds the lease);
- `repeat`: the attempt holding the token already ended with this event's outcome, so the
  command is a retried report: the first answer again, nothing changes;
- `cancel_requested`, `not_retryable`, `retries_left`: which way an attempt's end goes. A
  completion wins over a cancel request; a cancel request wins over a retry.

When no row holds, `refuse` is the one place that says why, and nothing has changed: a
report carrying a fencing token (heartbeat, complete, fail, release) is `stale_token` (its
lease is gone), except a heartbeat with a token never issued to a task that is not
running, and every other event (cancel, replay, discard) is `invalid_state`. A claim only
ever sees pending tasks (the claim queue holds nothing else) and the clock expires only
running ones, so they have no refusal.
"""
from __future__ import annotations

from collections.abc import Callable

from .errors import INVALID_STATE, STALE_TOKEN
from .model import CANCELLED, COMPLETED, DEAD_LETTER, DISCARDED, PENDING, RUNNING, Task
from .validate import Rejected

# Events: what a command or the clock does to a task.
CLAIM, HEARTBEAT, COMPLETE, FAIL, RELEASE = "claim", "heartbeat", "complete", "fail", "release"
EXPIRE, CANCEL, REPLAY, DISCARD = "expire", "cancel", "replay", "discard"
EVENTS = (CLAIM, HEARTBEAT, COMPLETE, FAIL, RELEASE, EXPIRE, CANCEL, REPLAY, DISCARD)
FENCED = (HEARTBEAT, COMPLETE, FAIL, RELEASE)   # commands carrying a fencing token
OUTCOME = {COMPLETE: "completed", FAIL: "failed", RELEASE: "released"}   # of the attempt


# --- guards: predicates of (task, the event, the command's fencing token, its `retryable`) --

def token(task: Task, event: str, tok: int, retryable: bool) -> bool:
    return tok == task.fencing_token


def cancel_requested(task: Task, event: str, tok: int, retryable: bool) -> bool:
    return task.cancel_requested


def not_retryable(task: Task, event: str, tok: int, retryable: bool) -> bool:
    return not retryable


def retries_left(task: Task, event: str, tok: int, retryable: bool) -> bool:
    return task.failures < task.max_retries


def repeat(task: Task, event: str, tok: int, retryable: bool) -> bool:
    attempt = task.current_attempt()
    return (task.fencing_token == tok and attempt is not None
            and attempt.fencing_token == tok and attempt.outcome == OUTCOME[event])


Guard = Callable[[Task, str, int, bool], bool]


class Row:
    """One row: from `state`, `event` leads to `new` when every guard holds. `repeat`: the
    row answers a retried report (no change)."""

    __slots__ = ("state", "event", "guards", "new", "repeat")

    def __init__(self, state: str, event: str, new: str, *guards: Guard) -> None:
        self.state, self.event, self.new, self.guards = state, event, new, guards
        self.repeat = repeat in guards

    def __repr__(self) -> str:
        names = ", ".join(g.__name__ for g in self.guards)
        return f"Row({self.state} --{self.event}[{names}]--> {self.new})"


# The rows of one (state, event) pair are tried in order: the first whose guards hold wins.
ROWS = (
    Row(PENDING, CLAIM, RUNNING),
    Row(PENDING, CANCEL, CANCELLED),
    Row(PENDING, FAIL, PENDING, repeat),                    # after a retry or a replay
    Row(PENDING, RELEASE, PENDING, repeat),
    Row(RUNNING, HEARTBEAT, RUNNING, token),
    Row(RUNNING, COMPLETE, COMPLETED, token),
    Row(RUNNING, FAIL, CANCELLED, token, cancel_requested),
    Row(RUNNING, FAIL, DEAD_LETTER, token, not_retryable),
    Row(RUNNING, FAIL, PENDING, token, retries_left),
    Row(RUNNING, FAIL, DEAD_LETTER, token),
    Row(RUNNING, RELEASE, CANCELLED, token, cancel_requested),
    Row(RUNNING, RELEASE, PENDING, token),                  # no retry used up
    Row(RUNNING, EXPIRE, CANCELLED, cancel_requested),      # lease expiry or timeout
    Row(RUNNING, EXPIRE, PENDING, retries_left),
    Row(RUNNING, EXPIRE, DEAD_LETTER),
    Row(RUNNING, CANCEL, RUNNING),                          # sets cancel_requested
    Row(COMPLETED, COMPLETE, COMPLETED, repeat),
    Row(CANCELLED, FAIL, CANCELLED, repeat),
    Row(CANCELLED, RELEASE, CANCELLED, repeat),
    Row(DEAD_LETTER, FAIL, DEAD_LETTER, repeat),
    Row(DEAD_LETTER, REPLAY, PENDING),
    Row(DEAD_LETTER, DISCARD, DISCARDED),        # kept for audit until retention
    Row(DISCARDED, FAIL, DISCARDED, repeat),     # the dead-lettering report again
)

TABLE: dict[tuple[str, str], tuple[Row, ...]] = {}
for _row in ROWS:
    TABLE[(_row.state, _row.event)] = TABLE.get((_row.state, _row.event), ()) + (_row,)
del _row


def decide(task: Task, event: str, tok: int = 0, retryable: bool = True) -> Row:
    """The row `event` takes for `task`, or `Rejected` (from `refuse`) when none holds."""
    for row in TABLE.get((task.state, event), ()):
        for guard in row.guards:
            if not guard(task, event, tok, retryable):
                break
        else:
            return row
    raise refuse(task, event, tok)


def refuse(task: Task, event: str, tok: int) -> Rejected:
    """Why `event` has no row for `task`: the one place a task command is refused for its
    state (see the header)."""
    if event in FENCED:
        if task.state == RUNNING:
            return Rejected(STALE_TOKEN, f"task {task.task_id} is held by token "
                            f"{task.fencing_token}", current_token=task.fencing_token)
        if event != HEARTBEAT or 0 < tok <= task.fencing_token:
            return Rejected(STALE_TOKEN, f"task {task.task_id} is {task.state}; token {tok} "
                            f"holds no lease", state=task.state)
    return Rejected(INVALID_STATE, f"task {task.task_id} is {task.state}", state=task.state)
