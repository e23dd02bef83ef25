"""The tenant a request is limited to: set by the auth layer (auth.py) from a tenant's
token, read by handlers (None: any tenant)."""
from __future__ import annotations

from aiohttp import web

# The tenant a scoped token is limited to, read by handlers through tenant_scope.
SCOPE_KEY: web.RequestKey[str] = web.RequestKey("tenant_scope", str)


# Who the request's token names (auth.Identity.name): `admin`, `tenant:<name>`; unset without
# [auth]. The audit trail records it as the actor of an operator action (DESIGN 14.6).
ACTOR_KEY: web.RequestKey[str] = web.RequestKey("actor", str)
ANONYMOUS = "anonymous"


def actor_of(request: web.Request) -> str:
    """The actor of the request's operator action: its token's identity, or `anonymous`
    on a node without [auth]."""
    return request.get(ACTOR_KEY, ANONYMOUS)


def tenant_scope(request: web.Request) -> str | None:
    """The tenant a scoped API token is limited to (None: any). Set by the auth layer."""
    return request.get(SCOPE_KEY)
