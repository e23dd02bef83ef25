"""API errors: a code (one of ERROR_CODES), a message and details (DESIGN.md section 7).
The HTTP status of each code is the API's business: api/jsonio.py `STATUS_BY_CODE`."""
from __future__ import annotations

from typing import Any

from tsched.statemachine.errors import Result
from tsched.statemachine.limits import API_LIMITS

# One JSON object as the API renders it (a task, a result, an error's body): the node's one
# name for it (scheduling/claim_request.py and the rest use it from here).
JsonObject = dict[str, Any]

# Every code an ApiError may carry; api/jsonio.py maps each to its HTTP status.
ERROR_CODES: frozenset[str] = frozenset({
    "invalid_argument",
    "unauthenticated",
    "forbidden",
    "not_found",
    "archive_not_configured",
    "method_not_allowed",
    "stale_token",
    "conflict",
    "invalid_state",
    "request_expired",
    "too_large",
    "tenant_limit",
    "overloaded",
    "internal",
    "no_leader",
    "unavailable",
    "timeout",
})


class ApiError(Exception):
    """A request that cannot be served; rendered as {"error": {code, message, details}}."""

    def __init__(self, code: str, message: str, details: dict | None = None) -> None:
        assert code in ERROR_CODES, code
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}

    def body(self) -> JsonObject:
        return error_body(self.code, self.message, self.details)


def error_body(code: str, message: str, details: dict | None = None) -> JsonObject:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def from_result(result: Result) -> ApiError:
    """A state machine rejection (statemachine.errors.Result) as an ApiError. A shed
    submit (`overloaded`) says when to retry (details and the Retry-After header)."""
    code = result.code if result.code in ERROR_CODES else "invalid_state"
    details = dict(result.details or {})
    if code == "overloaded":
        details.update(reason="priority", retry_after_s=API_LIMITS.shed_retry_after_s)
    return ApiError(code, result.message or code, details)


def invalid(message: str, **details: object) -> ApiError:
    return ApiError("invalid_argument", message, details)
