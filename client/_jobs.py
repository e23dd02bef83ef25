"""A claimed task inside the worker: its context for the handler and its outcome."""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from tsched.statemachine.limits import API_LIMITS, LIMITS

from ._core import ERROR_CHARS_MAX
from .errors import NonRetryable, RateLimited, RetryLater

ERROR_TYPE_CHARS_MAX = API_LIMITS.error_type_chars_max
ERROR_MESSAGE_CHARS_MAX = API_LIMITS.error_message_chars_max
TRACEBACK_CHARS_MAX = API_LIMITS.traceback_chars_max
ERROR_BYTES_MAX = LIMITS.error_bytes_max
PROGRESS_MESSAGE_CHARS_MAX = LIMITS.progress_message_chars_max

PARSED_TIMES_MAX = 1024   # distinct time strings remembered (a few claims' and batches' worth)

# Answers meaning the lease is no longer ours: stop, drop any late result.
LEASE_LOST_CODES = frozenset({"stale_token", "not_found", "invalid_state"})


def parse_time(value: Any) -> _dt.datetime | None:
    """API times are RFC 3339 strings; epoch seconds are accepted too."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return _dt.datetime.fromtimestamp(value, _dt.timezone.utc)
    if isinstance(value, str):
        return _parse_rfc3339(value)
    return _dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def epoch_s(value: Any) -> float | None:
    """An API time as epoch seconds (None stays None); strings through a cache, as
    `parse_time`: a Worker asks this of every task's run_at and lease end."""
    if isinstance(value, str):
        return _epoch_of_rfc3339(value)
    when = parse_time(value)
    return None if when is None else when.timestamp()


@functools.lru_cache(maxsize=PARSED_TIMES_MAX)
def _epoch_of_rfc3339(value: str) -> float:
    return _parse_rfc3339(value).timestamp()


@functools.lru_cache(maxsize=PARSED_TIMES_MAX)
def _parse_rfc3339(value: str) -> _dt.datetime:
    """Cached: the tasks of one claim share their lease's end, and those of one submitted
    batch their run_at, so most parses are repeats (they were a tenth of a Worker
    process's CPU with fast handlers). A datetime is immutable: sharing one is safe."""
    return _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


_MAKING_CONDITION = threading.Lock()


class CancelEvent(threading.Event):
    """A `threading.Event` whose Condition is made when first needed (`set`, `clear`,
    `wait`): most tasks are never cancelled nor waited on, and making a Condition for each
    was a tenth of a Worker process's CPU with fast handlers. `is_set` reads the flag."""

    def __init__(self) -> None:   # not super().__init__(), which makes the Condition
        self._flag = False
        self._made: threading.Condition | None = None

    @property
    def _cond(self) -> threading.Condition:   # what threading.Event's methods use
        made = self._made
        if made is None:
            with _MAKING_CONDITION:
                if self._made is None:
                    self._made = threading.Condition(threading.Lock())
                made = self._made
        return made

    def _at_fork_reinit(self) -> None:
        if self._made is not None:
            # CPython's own Event does the same to its Condition after a fork; the method
            # is private, so the type stubs do not list it.
            self._made._at_fork_reinit()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ParentFailed:
    """A workflow step's parent that did not complete (DESIGN 5.2): what a step with
    `on_parent_failure="run"` finds in `ctx.parents` in place of that parent's result."""
    state: str                 # dead_letter, cancelled or discarded
    error: str | None          # the parent's last error ("Type: message"), if any
    task_id: str


@dataclass
class TaskContext:
    """What a handler learns about the run it is doing. `cancelled` is set when the cluster
    asks to cancel the task, when the lease is lost, or when the worker stops past its grace
    period: a long handler should check it and return early. `parents`: a workflow step's
    parents, name -> result (or `ParentFailed`), fetched on first use."""
    task_id: str
    execution_id: str
    fencing_token: int
    attempt: int
    task_type: str
    tenant: str | None
    run_at: _dt.datetime | None
    cancelled: threading.Event = field(default_factory=CancelEvent)
    parents_of: Callable[[str], Any] | None = field(default=None, repr=False)
    _parents: dict[str, Any] | None = field(default=None, repr=False)
    progress_to: Callable[[float, str], None] | None = field(default=None, repr=False)

    def progress(self, fraction: float, message: str = "") -> None:
        """Report how far the run has got: `fraction` in 0..1 and a short message (cut to
        PROGRESS_MESSAGE_CHARS_MAX characters). Cheap, from any thread: the worker sends
        the latest report of each task with a heartbeat, at most one a second; `GET
        /v1/tasks/{id}`, `tsctl get` and the dashboard show it (DESIGN 9)."""
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) \
                or not 0 <= fraction <= 1:   # NaN fails the comparison too
            raise ValueError(f"progress fraction must be a number in 0..1, got {fraction!r}")
        if not isinstance(message, str):
            raise ValueError("progress message must be a string")
        if self.progress_to is not None:
            self.progress_to(float(fraction), message[:PROGRESS_MESSAGE_CHARS_MAX])

    @property
    def parents(self) -> dict[str, Any]:
        """Name -> result of each parent (a `ParentFailed` for one that failed); empty for
        a task that is no workflow step. One request, on first use: a handler that never
        looks costs nothing."""
        if self._parents is None:
            answer = self.parents_of(self.task_id) if self.parents_of is not None else {}
            self._parents = parents_from(answer)
        return self._parents


def parents_from(answer: Any) -> dict[str, Any]:
    """GET /v1/tasks/{id}/parents -> name -> result or ParentFailed, in deps order."""
    out: dict[str, Any] = {}
    for name, p in ((answer or {}).get("parents") or {}).items():
        if p.get("state") == "completed":
            out[name] = p.get("result")
        else:
            out[name] = ParentFailed(state=str(p.get("state")), error=p.get("error"),
                                     task_id=str(p.get("task_id")))
    return out


class Job:
    """One claimed task: context, local lease deadline, and what happened to it."""

    def __init__(self, task: dict[str, Any], lease_s: float,
                 parents_of: Callable[[str], Any] | None = None,
                 progress_due: Callable[[], None] | None = None) -> None:
        self.task = task
        self._run_at_s = epoch_s(task.get("run_at"))
        self.ctx = TaskContext(
            task_id=task["task_id"], execution_id=task.get("execution_id") or task["task_id"],
            fencing_token=int(task["fencing_token"]), attempt=int(task.get("attempt") or 1),
            task_type=task.get("task_type", ""), tenant=task.get("tenant"),
            run_at=parse_time(task.get("run_at")), parents_of=parents_of,
            progress_to=self._progressed)
        self.started = False
        self.returned = False      # its handler returned (the slot is free)
        self.lost = False          # the lease is gone: the result must not be reported
        self.reported = False
        # The handler's latest progress not sent yet (the latest wins), when the last was
        # sent (monotonic), and who to tell: the worker's sender (_worker.py).
        self.progress: tuple[float, str] | None = None
        self.progress_sent_at = 0.0
        self._progress_due = progress_due
        self.lease_deadline = 0.0
        self.extend(task.get("lease_expires_at"), lease_s)

    @staticmethod
    def _lease_left_s(expires_at: Any, fallback_s: float) -> float:
        when = epoch_s(expires_at)
        if when is None:
            return fallback_s
        return when - time.time()

    def extend(self, expires_at: Any, fallback_s: float) -> None:
        self.lease_deadline = time.monotonic() + self._lease_left_s(expires_at, fallback_s)

    def _progressed(self, fraction: float, message: str) -> None:
        self.progress = (fraction, message)   # one assignment: safe from a handler's thread
        if self._progress_due is not None:
            self._progress_due()

    def lose(self) -> None:
        self.lost = True
        self.ctx.cancelled.set()

    def delay_s(self) -> float:
        """Seconds until run_at by the local clock (early dispatch), 0 if due."""
        if self._run_at_s is None:
            return 0.0
        return max(0.0, self._run_at_s - time.time())


@dataclass(frozen=True)
class RetryRule:
    """Which exceptions of one task type are retried (DESIGN 14.1), by class name; an
    exception matches a name when its class or one of its bases has it. `no_retry_on` wins;
    with `retry_on` given only matching exceptions are retried; neither: all are."""
    retry_on: tuple[str, ...] = ()
    no_retry_on: tuple[str, ...] = ()

    def retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, NonRetryable):
            return False
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names.intersection(self.no_retry_on):
            return False
        return not self.retry_on or bool(names.intersection(self.retry_on))


RETRY_ALL = RetryRule()
_PLAIN_TYPES = (str, int, bool)    # serialisable as they are (a float may be NaN)


# The worker's own modules: the frames a traceback starts with before the handler's.
OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
CHAINED_MAX = 32   # exceptions of one chain (causes, contexts, groups) whose frames are cut


def user_traceback(exc: BaseException) -> str:
    """The exception's traceback without the worker's own frames in front of the user's
    (the thread, the worker and the call from a payload: `_threads.py`, `_worker.py`,
    `_appcall.py`), in every exception of its chain. An exception tsched raised itself
    (a payload that does not fit) keeps only its message."""
    top = traceback.TracebackException.from_exception(exc)
    todo, seen = [top], 0
    while todo and seen < CHAINED_MAX:
        part = todo.pop()
        seen += 1
        frames = list(part.stack)
        start = 0
        while start < len(frames) and frames[start].filename.startswith(OWN_DIR):
            start += 1
        part.stack = traceback.StackSummary.from_list(frames[start:])
        todo += [t for t in (part.__cause__, part.__context__) if t is not None]
        todo += list(getattr(part, "exceptions", None) or ())
    return "".join(top.format())


def error_detail(exc: BaseException) -> dict[str, str]:
    """`{type, message, traceback}` within the API's bounds: the traceback (the user's
    frames, `user_traceback`) keeps its last characters (where the exception was raised),
    trimmed further until the whole detail, as the node stores it (compact JSON, UTF-8),
    fits `error_bytes_max`."""
    detail = {"type": type(exc).__name__[:ERROR_TYPE_CHARS_MAX],
              "message": str(exc)[:ERROR_MESSAGE_CHARS_MAX],
              "traceback": user_traceback(exc)[-TRACEBACK_CHARS_MAX:]}
    while len(json.dumps(detail, separators=(",", ":"), ensure_ascii=False)
              .encode("utf-8", "surrogatepass")) > ERROR_BYTES_MAX:
        detail["traceback"] = detail["traceback"][len(detail["traceback"]) // 4 + 1:]
    return detail


def outcome_of(result: Any = None, exc: BaseException | None = None,
               rule: RetryRule = RETRY_ALL) -> dict[str, Any]:
    """The completion item (without task_id/token) for a handler's return value or exception."""
    if exc is None:
        if result is None or type(result) in _PLAIN_TYPES:
            return {"result": result}
        try:
            json.dumps(result)
        except (TypeError, ValueError) as err:
            return {"error": f"result is not JSON-serialisable: {err!r}"[:ERROR_CHARS_MAX],
                    "retryable": False}
        return {"result": result}
    if isinstance(exc, RetryLater):
        return {"error": error_detail(exc), "retryable": True, "retry_after_s": exc.after_s}
    if isinstance(exc, RateLimited):   # reported apart (_worker.py): no attempt counted
        return {"rate_limited": [exc.limit, exc.after_s], "error": error_detail(exc)}
    return {"error": error_detail(exc), "retryable": rule.retryable(exc)}


def error_code_of(answer: Any) -> str | None:
    """The error code inside one entry of a batch answer, or None for a success."""
    if not isinstance(answer, dict):
        return "invalid_answer"
    err = answer.get("error")
    if isinstance(err, dict):
        return str(err.get("code") or "unknown")
    return None
