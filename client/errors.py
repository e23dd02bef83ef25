"""Exceptions raised by the client library and understood by the worker runtime."""
from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answer of the API: `{"error": {"code", "message", "details"}}`."""

    def __init__(self, code: str, message: str = "", details: dict | None = None,
                 status: int | None = None) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details or {}
        self.status = status


class Unavailable(ApiError):
    """No node answered within the client's deadline (connection errors, 502/503/504)."""

    def __init__(self, message: str = "no node answered", details: dict | None = None) -> None:
        super().__init__("unavailable", message, details, status=None)


class Overloaded(ApiError):
    """429 `overloaded` (DESIGN 14.2), still refused after the client waited `Retry-After`
    as often as it may. `retry_after_s`: the cluster's last advice."""

    def __init__(self, message: str = "", details: dict | None = None,
                 retry_after_s: float = 1.0) -> None:
        super().__init__("overloaded", message, details, status=429)
        self.retry_after_s = retry_after_s


class NonRetryable(Exception):
    """Raised by a handler: the task fails at once and goes to `dead_letter`, no retry."""


class RetryLater(Exception):
    """Raised by a handler: the attempt failed and the next one is due after exactly
    `after_s` seconds instead of the backoff (a partner's rate limit, say). It still counts
    toward `max_retries`; `after_s` is bounded by the task's `retry.max_s` (DESIGN 9)."""

    def __init__(self, after_s: float, message: str = "") -> None:
        if not after_s > 0:
            raise ValueError("after_s must be > 0")
        super().__init__(message or f"retry after {after_s:g} s")
        self.after_s = after_s


class RateLimited(Exception):
    """Raised by a handler when a partner refused a call for its rate (a 429): the task's
    partition of the keyed limit `limit` (one the task names) claims nothing for `after_s`
    seconds, for every worker, and the task goes back to pending without its attempt
    counted (unlike RetryLater, it uses up no retry)."""

    def __init__(self, limit: str, after_s: float = 1.0, message: str = "") -> None:
        if not after_s > 0:
            raise ValueError("after_s must be > 0")
        super().__init__(message or f"limit {limit} rate limited for {after_s:g} s")
        self.limit = limit
        self.after_s = after_s
