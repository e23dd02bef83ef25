"""Handles of submitted tasks: `.result(timeout_s)`, `.status()`, `.cancel()`.

The API has no long-poll on a task's change, so `result` polls the task, first often (a
short task's result comes back within milliseconds), then every POLL_MAX_S.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Iterator

from ._api import TERMINAL_STATES
from .client import AsyncClient, Client

POLL_FIRST_S = 0.01
POLL_MAX_S = 0.5
RESULT_TIMEOUT_S = 60.0


class TaskFailed(Exception):
    """The task ended without a result: dead-lettered (`last_error` says why) or cancelled."""

    def __init__(self, task: dict[str, Any]) -> None:
        self.task = task
        self.task_id: str = str(task.get("task_id"))
        self.state: str = str(task.get("state"))
        self.last_error: str | None = task.get("last_error")
        super().__init__(f"task {self.task_id} ended {self.state}"
                         + (f": {self.last_error}" if self.last_error else ""))


class TaskCancelled(TaskFailed):
    """The task was cancelled before it completed."""


def outcome(task: dict[str, Any]) -> Any:
    """A terminal task's result, or its failure raised."""
    if task.get("state") == "completed":
        return task.get("result")
    if task.get("state") == "cancelled":
        raise TaskCancelled(task)
    raise TaskFailed(task)


def is_terminal(task: dict[str, Any]) -> bool:
    return task.get("state") in TERMINAL_STATES


def poll_delays() -> Iterator[float]:
    delay = POLL_FIRST_S
    while True:
        yield delay
        delay = min(POLL_MAX_S, delay * 2)


def _timed_out(task_id: str, state: Any, timeout_s: float) -> TimeoutError:
    return TimeoutError(f"task {task_id} is still {state} after {timeout_s:g} s")


class _HandleBase:
    def __init__(self, task: dict[str, Any]) -> None:
        self.task_id: str = task["task_id"]
        self.duplicate: bool = bool(task.get("duplicate"))
        self.last: dict[str, Any] = task    # the task as last seen

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.task_id} {self.last.get('state')}>"


class TaskHandle(_HandleBase):
    def __init__(self, client: Client, task: dict[str, Any]) -> None:
        super().__init__(task)
        self._client = client

    def refresh(self) -> dict[str, Any]:
        """The task as the cluster has it now (read-your-writes from any node)."""
        self.last = self._client.get(self.task_id)
        return self.last

    def status(self) -> str:
        return str(self.refresh()["state"])

    def cancel(self) -> str:
        """Cancel the task (a running one cooperatively); returns its state after that."""
        self.last = self._client.cancel(self.task_id)
        return str(self.last["state"])

    def result(self, timeout_s: float = RESULT_TIMEOUT_S) -> Any:
        """Wait for the task's end: its result, or TaskFailed / TaskCancelled; TimeoutError
        when it has not ended within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        task = self.refresh()
        for delay in poll_delays():
            if is_terminal(task):
                return outcome(task)
            if time.monotonic() + delay > deadline:
                raise _timed_out(self.task_id, task.get("state"), timeout_s)
            time.sleep(delay)
            task = self.refresh()


class AsyncTaskHandle(_HandleBase):
    def __init__(self, client: AsyncClient, task: dict[str, Any]) -> None:
        super().__init__(task)
        self._client = client

    async def refresh(self) -> dict[str, Any]:
        self.last = await self._client.get(self.task_id)
        return self.last

    async def status(self) -> str:
        return str((await self.refresh())["state"])

    async def cancel(self) -> str:
        self.last = await self._client.cancel(self.task_id)
        return str(self.last["state"])

    async def result(self, timeout_s: float = RESULT_TIMEOUT_S) -> Any:
        deadline = time.monotonic() + timeout_s
        task = await self.refresh()
        for delay in poll_delays():
            if is_terminal(task):
                return outcome(task)
            if time.monotonic() + delay > deadline:
                raise _timed_out(self.task_id, task.get("state"), timeout_s)
            await asyncio.sleep(delay)
            task = await self.refresh()
