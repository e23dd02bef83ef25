"""tsched client library, worker runtime and the tsctl CLI.

    from tsched.client import Client, AsyncClient, Worker, NonRetryable, ApiError
"""
from ._jobs import TaskContext
from .client import AsyncClient, Client
from .errors import ApiError, NonRetryable, Unavailable
from .worker import Worker

__all__ = ["ApiError", "AsyncClient", "Client", "NonRetryable", "TaskContext", "Unavailable",
           "Worker"]
