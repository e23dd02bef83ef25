"""API error codes and their HTTP statuses: the one table (DESIGN.md section 7)."""
from __future__ import annotations

from typing import Any

from tsched.statemachine.limits import API_LIMITS

STATUS_BY_CODE: dict[str, int] = {
    "invalid_argument": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "not_found": 404,
    "archive_not_configured": 404,   # GET /v1/archive on a node without [archive] (14.3)
    "method_not_allowed": 405,
    "stale_token": 409,
    "conflict": 409,
    "invalid_state": 409,
    "request_expired": 409,     # the cluster moved past the id's window: final, as stale_token
    "too_large": 413,
    "tenant_limit": 429,
    "overloaded": 429,          # shed or a full proposal queue: comes with Retry-After
    "internal": 500,
    "no_leader": 503,
    "unavailable": 503,
    "timeout": 504,
}


class ApiError(Exception):
    """A request that cannot be served; rendered as {"error": {code, message, details}}."""

    def __init__(self, code: str, message: str, details: dict | None = None) -> None:
        assert code in STATUS_BY_CODE, code
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}

    @property
    def status(self) -> int:
        return STATUS_BY_CODE[self.code]

    def body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, self.details)


def error_body(code: str, message: str, details: dict | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def from_result(result) -> ApiError:
    """A state machine rejection (statemachine.errors.Result) as an ApiError. A shed
    submit (`overloaded`) says when to retry (details and the Retry-After header)."""
    code = result.code if result.code in STATUS_BY_CODE else "invalid_state"
    details = dict(result.details or {})
    if code == "overloaded":
        details.update(reason="priority", retry_after_s=API_LIMITS.shed_retry_after_s)
    return ApiError(code, result.message or code, details)


def invalid(message: str, **details: Any) -> ApiError:
    return ApiError("invalid_argument", message, details)
