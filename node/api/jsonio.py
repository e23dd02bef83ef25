"""JSON in and out: the request body parsed and bounded, answers with the applied seq, the
error shape and each error code's HTTP status, and the `Prefer: return=minimal` preference."""
from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tsched.statemachine.limits import API_LIMITS

from tsched.node.api import validate
from tsched.node.errors import ERROR_CODES, ApiError

# The HTTP status of every error code: the one table (DESIGN.md section 7).
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
assert set(STATUS_BY_CODE) == ERROR_CODES, "every error code has its status"


def status_of(err: ApiError) -> int:
    return STATUS_BY_CODE[err.code]


# aiohttp's own HTTP errors (no route, wrong method, body too large) in our error shape.
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


def http_error(request: web.Request, e: web.HTTPException) -> ApiError:
    """aiohttp's own error in our shape (the node's and the shard router's); a request no
    route matches carries `details.reason = "no_route"` (a wrong base URL, told apart from
    a missing resource)."""
    if e.status == 413:
        return validate.body_too_large(request.content_length)
    details: dict[str, object] = {"status": e.status}
    if e.status == 404 and request.match_info.http_exception is not None:
        details["reason"] = "no_route"
    return ApiError(_HTTP_CODES.get(e.status, "invalid_argument"), e.reason, details)


def error_status(e: Exception) -> int:
    """The status an exception a handler raised is answered with (for the metrics)."""
    if isinstance(e, ApiError):
        return STATUS_BY_CODE[e.code]
    status = getattr(e, "status", 500)
    return status if isinstance(status, int) else 500


async def json_body(request: web.Request) -> Any:
    """The parsed body, or None when there is none. Size is bounded by client_max_size."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise validate.invalid(f"body is not valid JSON: {e}") from None
    validate.json_depth(value, raw)
    return value


def respond(body: dict, seq: int, status: int = 200, minimal: bool = False,
            leader_url: str | None = None) -> web.Response:
    """`minimal`: the answer honoured `Prefer: return=minimal` (RFC 7240 says to tell).
    `leader_url`: named in LEADER_HEADER (claims: a client may send its next one there)."""
    body["applied_seq"] = seq
    headers = {"X-Applied-Seq": str(seq)}
    if minimal:
        headers[PREFERENCE_APPLIED_HEADER] = RETURN_MINIMAL
    if leader_url is not None:
        headers[LEADER_HEADER] = leader_url
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json",
                        headers=headers)


LEADER_HEADER = "X-Tsched-Leader"   # the leader's URL, on claim answers
PREFER_HEADER = "Prefer"
PREFERENCE_APPLIED_HEADER = "Preference-Applied"
RETURN_MINIMAL = "return=minimal"
PREFER_BYTES_MAX = 1024


def prefers_minimal(request: web.Request) -> bool:
    """The request says `Prefer: return=minimal` (RFC 7240): the tasks a submit creates and
    the completions and failures it reports are then answered by each task's id and state
    (present.minimal_result). A preference the node does not know, or a header past
    PREFER_BYTES_MAX, is ignored, as the RFC asks."""
    raw = request.headers.get(PREFER_HEADER)
    if not raw or len(raw) > PREFER_BYTES_MAX:
        return False
    for pref in raw.split(","):
        name, _, value = pref.split(";", 1)[0].strip().partition("=")
        if name.strip().lower() == "return" and value.strip().strip('"').lower() == "minimal":
            return True
    return False


def error_response(err: ApiError, seq: int | None) -> web.Response:
    body = err.body()
    headers = {}
    if err.code == "overloaded":   # DESIGN 14.2: every overloaded answer says when to retry
        headers["Retry-After"] = str(err.details.get("retry_after_s")
                                     or API_LIMITS.shed_retry_after_s)
    if seq is not None:
        body["applied_seq"] = seq
        headers["X-Applied-Seq"] = str(seq)
    return web.Response(body=orjson.dumps(body), status=status_of(err),
                        content_type="application/json", headers=headers)
