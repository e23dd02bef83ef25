"""tsched client library, worker runtime and the tsctl CLI.

    from tsched.client import App, AsyncApp, TaskFailed          # tasks as decorated functions
    from tsched.client import Client, AsyncClient, Worker, NonRetryable, ApiError
    from tsched.client import effect_once   # a handler's database effect, once per execution

`Worker` (and `tsworker`) load when first named: `python -m tsched.client.worker` runs that
module as `__main__`, which must not be imported already by its package.
"""
from typing import TYPE_CHECKING, Any

from ._jobs import ParentFailed, TaskContext
from .app import App, AsyncApp
from .canvas import WorkflowFailed, WorkflowHandle, chain, chord, group
from .client import AsyncClient, Client
from .effects import effect_once
from .errors import ApiError, NonRetryable, Overloaded, RateLimited, RetryLater, Unavailable
from .handles import TaskCancelled, TaskFailed

if TYPE_CHECKING:
    from .worker import Worker

__all__ = ["ApiError", "App", "AsyncApp", "AsyncClient", "Client", "NonRetryable", "Overloaded",
           "ParentFailed", "RateLimited", "RetryLater", "TaskCancelled", "TaskContext",
           "TaskFailed", "Unavailable", "Worker", "WorkflowFailed", "WorkflowHandle", "chain", "chord",
           "effect_once", "group"]


def __getattr__(name: str) -> Any:
    if name == "Worker":
        from .worker import Worker
        return Worker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
