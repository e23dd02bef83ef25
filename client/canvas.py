"""Celery's canvas on tsched's workflows (DESIGN.md section 5.2): `add.s(1, 2)`, `chain`,
`group`, `chord`, and `app.batch(tasks, then=callback)`, each submitted as one workflow
(one request, one Raft entry) whose steps the cluster runs as their parents complete.

    from tsched.client import chain, chord, group

    chain(add.s(2, 2), add.s(4), add.s(8)).apply_async().get()      # ((2+2)+4)+8 = 16
    group(add.s(i, i) for i in range(10)).apply_async().get()        # [0, 2, ..., 18]
    chord((add.s(i, i) for i in range(10)), tsum.s()).apply_async().get()   # 90

As in Celery, a signature made with `.s()` gets its parent's result as its first argument
(after a group: the list of the group's results, in order); one made with `.si()` gets
nothing. A batch's callback gets nothing either: it reads `ctx.parents` (name -> result).
A step's parents' results reach it through the cluster, never through the caller.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Union

from . import _appcall
from .handles import TaskFailed, poll_delays

if TYPE_CHECKING:
    from .app import App, AsyncApp
    from .app_task import AnyTask

STEP_NAME_CHARS_MAX = 128
FIRST, ALL = "first", "list"   # what a mutable signature gets: its parent's result, or all


class _Step:
    """What a signature and a group share: submitted as a chain of one, piped into one."""

    def apply_async(self) -> Any:
        return chain(self).apply_async()

    def delay(self) -> Any:
        return self.apply_async()

    def __or__(self, other: "Canvas") -> "chain":
        return chain(self, other)


@dataclass(frozen=True)
class Signature(_Step):
    """One call of a task, not yet submitted (Celery's `add.s(1, 2)`)."""
    task: "AnyTask"
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    immutable: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    def set(self, **options: Any) -> "Signature":
        """Per-step options: priority, timeout_s, max_retries, retry, on_parent_failure."""
        return Signature(self.task, self.args, self.kwargs, self.immutable,
                         {**self.options, **options})


@dataclass(frozen=True, init=False)
class group(_Step):
    """Steps that run side by side; after one, the next step gets the list of results."""
    members: tuple["Canvas", ...]

    def __init__(self, *members: Any) -> None:
        if len(members) == 1 and not isinstance(members[0], (Signature, group, chain, chord)):
            members = tuple(members[0])   # group(generator), as Celery takes
        object.__setattr__(self, "members", tuple(members))


@dataclass(frozen=True, init=False)
class chain:
    """Steps one after another: each gets the result of the one before (`.s()`)."""
    links: tuple["Canvas", ...]

    def __init__(self, *links: Any) -> None:
        if len(links) == 1 and not isinstance(links[0], (Signature, group, chain, chord)):
            links = tuple(links[0])
        object.__setattr__(self, "links", tuple(links))

    def apply_async(self) -> Any:
        return _submit(self)

    delay = apply_async

    def __or__(self, other: "Canvas") -> "chain":
        return chain(*self.links, other)


@dataclass(frozen=True, init=False)
class chord:
    """A group, then one callback that gets the list of its results: Celery's chord,
    resolved by the cluster in the apply that completes the group's last step (nothing
    polls, no `chord_unlock`)."""
    header: group
    body: "Canvas | None"

    def __init__(self, header: Any, body: "Canvas | None" = None) -> None:
        object.__setattr__(self, "header", header if isinstance(header, group)
                           else group(*header))
        object.__setattr__(self, "body", body)

    def __call__(self, body: "Canvas") -> Any:
        """`chord(header)(body)`, as in Celery: submitted at once."""
        return chord(self.header, body).apply_async()

    def apply_async(self) -> Any:
        if self.body is None:
            raise TypeError("a chord needs its callback: chord(header, body)")
        return _submit(self)

    delay = apply_async


Canvas = Union[Signature, group, chain, chord]


# --- the graph -------------------------------------------------------------------------------

class _Graph:
    """Steps as the API takes them, named `<index>:<task name>`."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.app: "App | AsyncApp | None" = None

    def add(self, sig: Signature, deps: list[str], gets: str | None) -> str:
        task = sig.task
        self.app = self.app or getattr(task, "app", None)
        args = list(sig.args)
        gets = None if sig.immutable or not deps else gets
        probe = [None, *args] if gets else args   # the parent's result comes first
        try:
            task.signature.check(probe, sig.kwargs)
        except TypeError as exc:
            raise TypeError(f"{task.name}: {exc}") from None
        payload = _appcall.encode(task.name, args, sig.kwargs)
        if gets:
            payload["parents"] = gets
        name = f"{len(self.steps)}:{task.name}"[:STEP_NAME_CHARS_MAX]
        options = task.options.over(task._call_options).fields()
        for key in ("tenant", "run_at", "delay_s", "idempotency_key"):
            options.pop(key, None)
        self.steps.append({"name": name, "task_type": task.name, "payload": payload,
                           "deps": deps, **options, **sig.options})
        return name

    def build(self, node: Canvas, deps: list[str], gets: str | None) -> list[str]:
        """The node's steps after `deps`; returns its tails (what a next step waits for)."""
        if isinstance(node, Signature):
            return [self.add(node, deps, gets)]
        if isinstance(node, group):
            return [t for m in node.members for t in self.build(m, deps, gets)]
        if isinstance(node, chord):
            if node.body is None:
                raise TypeError("a chord needs its callback: chord(header, body)")
            return self.build(chain(node.header, node.body), deps, gets)
        tails, prev = deps, None
        for link in node.links:
            tails = self.build(link, tails, gets if prev is None else _gets(prev))
            prev = link
        return tails


def _gets(previous: Canvas) -> str:
    """What a step after `previous` gets: a group's (or a chord header's) list, else the
    one result."""
    if isinstance(previous, group):
        return ALL
    if isinstance(previous, chain) and previous.links:
        return _gets(previous.links[-1])
    return FIRST


def graph_of(node: Canvas) -> tuple[list[dict[str, Any]], list[str], "App | AsyncApp | None"]:
    """(the steps, the names of the last ones, the app of its tasks)."""
    g = _Graph()
    tails = g.build(node, [], None)
    return g.steps, tails, g.app


def _submit(node: Canvas) -> Any:
    """A WorkflowHandle (an App's tasks), or a coroutine of an AsyncWorkflowHandle (an
    AsyncApp's: `await chain(...).apply_async()`)."""
    steps, tails, app = graph_of(node)
    if app is None:
        raise ValueError("an empty canvas has nothing to submit")
    return app.submit_workflow(steps, tails, single=not isinstance(node, group))


# --- handles -----------------------------------------------------------------------------------

class WorkflowFailed(TaskFailed):
    """A workflow that ended without completing every step."""


class WorkflowHandle:
    """A submitted workflow: `get()`/`result()` waits for it and returns its last step's
    result (a group: the list of its steps' results)."""

    def __init__(self, client: Any, workflow: dict[str, Any], tails: list[str],
                 single: bool) -> None:
        self.client, self.workflow, self.tails, self.single = client, workflow, tails, single
        self.id = workflow["workflow_id"]

    def __repr__(self) -> str:
        return f"<workflow {self.id} {self.workflow.get('state')}>"

    def refresh(self) -> dict[str, Any]:
        self.workflow = self.client.get_workflow(self.id)
        return self.workflow

    def cancel(self) -> dict[str, Any]:
        self.workflow = self.client.cancel_workflow(self.id)
        return self.workflow

    def result(self, timeout_s: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout_s
        delays = poll_delays()
        while self.refresh()["state"] == "running":
            if time.monotonic() >= deadline:
                raise TimeoutError(f"workflow {self.id} still running after {timeout_s} s")
            time.sleep(min(next(delays), max(0.0, deadline - time.monotonic())))
        return self._outcome()

    def _outcome(self) -> Any:
        """The finished workflow's last steps' results; WorkflowFailed if it did not
        complete."""
        if self.workflow["state"] != "completed":
            raise WorkflowFailed({"task_id": self.id, "state": self.workflow["state"],
                                  "last_error": f"workflow {self.workflow['state']}"})
        by_name = {s["name"]: s.get("result") for s in self.workflow["steps"]}
        results = [by_name[t] for t in self.tails]
        return results[0] if self.single and len(results) == 1 else results

    get = result


class AsyncWorkflowHandle(WorkflowHandle):
    """A WorkflowHandle over the AsyncClient: `await handle.get()`."""

    async def refresh(self) -> dict[str, Any]:   # type: ignore[override]
        self.workflow = await self.client.get_workflow(self.id)
        return self.workflow

    async def cancel(self) -> dict[str, Any]:   # type: ignore[override]
        self.workflow = await self.client.cancel_workflow(self.id)
        return self.workflow

    async def result(self, timeout_s: float = 60.0) -> Any:   # type: ignore[override]
        deadline = time.monotonic() + timeout_s
        delays = poll_delays()
        while (await self.refresh())["state"] == "running":
            if time.monotonic() >= deadline:
                raise TimeoutError(f"workflow {self.id} still running after {timeout_s} s")
            await asyncio.sleep(min(next(delays), max(0.0, deadline - time.monotonic())))
        return self._outcome()

    get = result


def batch_steps(tasks: Iterable[Signature], then: Signature | None) -> chord | group:
    """`app.batch`: a fan-out and one callback after all of it; the callback gets no
    arguments from them (it reads `ctx.parents`)."""
    header = group(*tasks)
    if then is None:
        return header
    body = Signature(then.task, then.args, then.kwargs, True, then.options)
    return chord(header, body)
