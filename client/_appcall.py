"""How a decorated function's call travels and how the worker makes it again.

A call's arguments travel as the task's payload `{"args": [...], "kwargs": {...}}` (JSON).
A function that declares a parameter named `ctx` gets the run's `TaskContext` there; the
caller never passes it (it is not part of the payload).
"""
from __future__ import annotations

import inspect
import json
from typing import Any, Awaitable, Callable, Sequence

from ._jobs import TaskContext
from .errors import NonRetryable

CTX_PARAM = "ctx"
RESERVED_PARAMS = ("delay_s",)   # `fn.submit(..., delay_s=10)` takes it: not an argument name
Handler = Callable[[Any, TaskContext], Any]


class Signature:
    """The function's parameters, with and without `ctx`."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.full = inspect.signature(fn)
        params = list(self.full.parameters.values())
        names = [p.name for p in params]
        for name in RESERVED_PARAMS:
            if name in names:
                raise TypeError(f"{fn.__qualname__}: a task parameter may not be named "
                                f"{name!r} (submit takes it as an option)")
        self.ctx_index = names.index(CTX_PARAM) if CTX_PARAM in names else None
        self.ctx_keyword_only = (self.ctx_index is not None
                                 and params[self.ctx_index].kind is inspect.Parameter.KEYWORD_ONLY)
        self.without_ctx = self.full.replace(
            parameters=[p for p in params if p.name != CTX_PARAM])

    @property
    def takes_ctx(self) -> bool:
        return self.ctx_index is not None

    def check(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """Raises TypeError when the arguments do not fit the function (besides `ctx`)."""
        self.without_ctx.bind(*args, **kwargs)

    def arguments(self, args: Sequence[Any], kwargs: dict[str, Any],
                  ctx: TaskContext) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The positional and keyword arguments of the real call, `ctx` put in its place."""
        if self.ctx_index is None:
            return tuple(args), dict(kwargs)
        if self.ctx_keyword_only or len(args) < self.ctx_index:
            return tuple(args), {**kwargs, CTX_PARAM: ctx}
        i = self.ctx_index
        return (*args[:i], ctx, *args[i:]), dict(kwargs)


def encode(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The payload of one call; refused here, not by the cluster, when it is not JSON."""
    payload = {"args": list(args), "kwargs": dict(kwargs)}
    try:
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: the arguments are not JSON-serialisable: {exc}") from None
    return payload


def decode(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    """(args, kwargs) of a payload; no payload is a call without arguments (a schedule or
    `tsctl submit` may leave it out)."""
    if payload is None:
        return [], {}
    if not isinstance(payload, dict) or set(payload) - {"args", "kwargs", "parents"}:
        raise NonRetryable('the payload must be {"args": [...], "kwargs": {...}}')
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise NonRetryable('the payload must be {"args": [...], "kwargs": {...}}')
    return args, kwargs


def with_parents(payload: Any, args: list[Any], ctx: TaskContext) -> list[Any]:
    """A workflow step made by `.s()` (canvas.py) gets its parent's result first, or the
    list of its parents' results (after a group), as Celery's canvas passes them."""
    gets = payload.get("parents") if isinstance(payload, dict) else None
    if gets is None:
        return args
    results = list(ctx.parents.values())
    if gets == "first":
        return [results[0] if results else None, *args]
    if gets == "list":
        return [results, *args]
    raise NonRetryable(f"the payload's parents must be first or list, not {gets!r}")


def _prepared(sig: Signature, payload: Any,
              ctx: TaskContext) -> tuple[tuple[Any, ...], dict[str, Any]]:
    args, kwargs = decode(payload)
    args = with_parents(payload, args, ctx)
    try:
        sig.check(args, kwargs)
    except TypeError as exc:   # a retry would fail the same way
        raise NonRetryable(f"the arguments do not fit: {exc}") from None
    return sig.arguments(args, kwargs, ctx)


def _check_retry_on(exc: Exception, retry_on: tuple[type[BaseException], ...] | None) -> None:
    """With `retry_on`, only those exceptions are retried: any other one dead-letters."""
    if retry_on is not None and not isinstance(exc, (NonRetryable, *retry_on)):
        raise NonRetryable(repr(exc)) from exc


def handler_for(fn: Callable[..., Any], sig: Signature,
                retry_on: tuple[type[BaseException], ...] | None) -> Handler:
    """The Worker's `handler(payload, ctx)` for a decorated function (sync or async)."""
    if inspect.iscoroutinefunction(fn):
        async_fn: Callable[..., Awaitable[Any]] = fn

        async def run_async(payload: Any, ctx: TaskContext) -> Any:
            args, kwargs = _prepared(sig, payload, ctx)
            try:
                return await async_fn(*args, **kwargs)
            except Exception as exc:
                _check_retry_on(exc, retry_on)
                raise
        return run_async

    def run(payload: Any, ctx: TaskContext) -> Any:
        args, kwargs = _prepared(sig, payload, ctx)
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            _check_retry_on(exc, retry_on)
            raise
    return run
