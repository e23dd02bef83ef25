"""The request ids that make a retried request (same Idempotency-Key) apply once."""
from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from tsched.statemachine.request_ids import request_ids_for

from tsched.node.api import validate
from tsched.node.api.scope import SCOPE_KEY
from tsched.node.ids import new_id


def request_id(request: web.Request, suffix: str = "") -> str:
    """The client's Idempotency-Key makes a retried request apply once; else a fresh id.

    The id is a digest over the caller's tenant scope too: one tenant's key never answers
    with another tenant's recorded result, and a long key or path stays within the state
    machine's id length."""
    return request_ids(request)(suffix)


def request_ids(request: web.Request) -> Callable[[str], str]:
    """`request_id(request, suffix)` for the items of one batch (`#i`): the key is checked
    and the request's part of the digest joined once, not once per item."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return lambda suffix: new_id()
    validate.text(key, "Idempotency-Key", validate.IDEMPOTENCY_KEY_CHARS_MAX)
    return request_ids_for(request.get(SCOPE_KEY) or "", request.method, request.path, key)
