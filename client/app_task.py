"""A decorated function as a task: its options, its submit calls, its schedule (`Periodic`).

The App (app.py) makes these; a call's arguments travel as `_appcall` says."""
from __future__ import annotations

import copy
import datetime as _dt
from dataclasses import dataclass, field, replace
from typing import (TYPE_CHECKING, Any, Callable, Generic, Iterable, ParamSpec, Self, Sequence,
                    TypeVar)

from . import _appcall
from .canvas import Signature
from .errors import ApiError
from .handles import AsyncTaskHandle, TaskHandle

if TYPE_CHECKING:
    from .app import App, AsyncApp

P = ParamSpec("P")
R = TypeVar("R")
Time = _dt.datetime | str | float
Call = tuple[Sequence[Any], dict[str, Any]]   # one call of submit_many: (args, kwargs)


@dataclass(frozen=True)
class Options:
    """The submit fields of a task (decorator defaults, `using` overrides); None: unset."""
    tenant: str | None = None
    priority: int | None = None
    timeout_s: float | None = None
    max_retries: int | None = None
    retry: dict[str, Any] | None = None
    run_at: Time | None = None
    delay_s: float | None = None
    idempotency_key: str | None = None
    limits: tuple[str, ...] | None = None   # names of keyed limits (App.limit)

    def fields(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}

    def over(self, other: "Options") -> "Options":
        """These options with `other`'s set ones on top."""
        return replace(self, **other.fields())


@dataclass(frozen=True)
class Periodic:
    """A schedule that `tsworker` puts for a task (DESIGN.md section 5, Schedules). Every
    field is explicit, the cluster's defaults included, so that comparing the declaration
    with the stored schedule tells whether it changed."""
    schedule_id: str
    task_type: str
    cron: str
    timezone: str = "UTC"
    tenant: str | None = None
    overlap: str = "allow"
    misfire: str = "run_all"
    catchup_window_s: float = 60
    jitter_s: float = 0
    start_at: Time | None = None
    end_at: Time | None = None
    template: dict[str, Any] = field(default_factory=dict)   # priority, timeout_s, ...


class _TaskBase(Generic[P, R]):
    """A decorated function: runs locally when called, knows how to travel as a task."""

    def __init__(self, fn: Callable[P, R], name: str, options: Options,
                 retry_on: tuple[type[BaseException], ...] | None) -> None:
        self.fn = fn
        self.name = name
        self.options = options
        self.retry_on = retry_on
        self.signature = _appcall.Signature(fn)
        self._call_options = Options()
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<task {self.name}>"

    def using(self, **options: Any) -> Self:
        """This task with per-call options: tenant, priority, run_at, delay_s, timeout_s,
        max_retries, retry, idempotency_key."""
        clone = copy.copy(self)
        clone._call_options = self._call_options.over(Options(**options))
        return clone

    def handler(self) -> _appcall.Handler:
        """The Worker's handler for this task."""
        return _appcall.handler_for(self.fn, self.signature, self.retry_on)

    def _request(self, args: Sequence[Any], kwargs: dict[str, Any],
                 options: Options) -> dict[str, Any]:
        """One submit's body fields: the payload checked against the signature, and options."""
        try:
            self.signature.check(args, kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from None
        payload = _appcall.encode(self.name, args, kwargs)
        return {"task_type": self.name, "payload": payload,
                **self.options.over(options).fields()}

    def _batch(self, calls: Iterable[Call], options: Options) -> list[dict[str, Any]]:
        if options.idempotency_key is not None:
            raise ValueError("submit_many: one idempotency_key cannot name several tasks")
        return [self._request(args, kwargs, options) for args, kwargs in calls]


def _checked(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tasks of a batch answer; an entry the cluster refused raises its ApiError (the
    entries before it are submitted: their ids are in the error's details)."""
    for i, answer in enumerate(answers):
        err = answer.get("error")
        if isinstance(err, dict):
            done = [a.get("task_id") for a in answers if "error" not in a]
            raise ApiError(str(err.get("code")), f"tasks[{i}]: {err.get('message', '')}",
                           {"index": i, "submitted": done, **(err.get("details") or {})})
    return answers


class Task(_TaskBase[P, R]):
    """A task of an `App`: `submit`, `submit_many`, `using`."""

    def __init__(self, app: "App", fn: Callable[P, R], name: str, options: Options,
                 retry_on: tuple[type[BaseException], ...] | None) -> None:
        super().__init__(fn, name, options, retry_on)
        self.app = app

    def submit(self, *args: Any, delay_s: float | None = None, **kwargs: Any) -> TaskHandle:
        """Submit one call; `delay_s` runs it that many seconds from now."""
        opts = self._call_options.over(Options(delay_s=delay_s))
        body = self._request(args, kwargs, opts)
        task = self.app.client.submit(body.pop("task_type"), body.pop("payload"), **body)
        return TaskHandle(self.app.client, task)

    def submit_many(self, calls: Iterable[Call]) -> list[TaskHandle]:
        """Submit several calls `[(args, kwargs), ...]` in one request (one Raft entry)."""
        answers = self.app.client.submit_many(self._batch(calls, self._call_options)) or []
        return [TaskHandle(self.app.client, t) for t in _checked(answers)]

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A call to run as a workflow step (Celery's `add.s(1, 2)`): after a parent, the
        parent's result comes first (canvas.py)."""
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable step: its parents' results are not passed in (`ctx.parents` has
        them)."""
        return Signature(self, args, kwargs, immutable=True)


class AsyncTask(_TaskBase[P, R]):
    """A task of an `AsyncApp`: the same calls, awaited."""

    def __init__(self, app: "AsyncApp", fn: Callable[P, R], name: str, options: Options,
                 retry_on: tuple[type[BaseException], ...] | None) -> None:
        super().__init__(fn, name, options, retry_on)
        self.app = app

    async def submit(self, *args: Any, delay_s: float | None = None,
                     **kwargs: Any) -> AsyncTaskHandle:
        opts = self._call_options.over(Options(delay_s=delay_s))
        body = self._request(args, kwargs, opts)
        task = await self.app.client.submit(body.pop("task_type"), body.pop("payload"), **body)
        return AsyncTaskHandle(self.app.client, task)

    async def submit_many(self, calls: Iterable[Call]) -> list[AsyncTaskHandle]:
        answers = await self.app.client.submit_many(self._batch(calls, self._call_options))
        return [AsyncTaskHandle(self.app.client, t) for t in _checked(answers or [])]

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """As `Task.s`: `await chain(a.s(1), b.s()).apply_async()` with an AsyncApp."""
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        return Signature(self, args, kwargs, immutable=True)


AnyTask = _TaskBase[Any, Any]
