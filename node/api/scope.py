"""The tenant a request is limited to: set by the auth layer (auth.py) from a tenant's
token, read by handlers (None: any tenant)."""
from __future__ import annotations

from aiohttp import web

# The tenant a scoped token is limited to, read by handlers through tenant_scope.
SCOPE_KEY: web.RequestKey[str] = web.RequestKey("tenant_scope", str)


def tenant_scope(request: web.Request) -> str | None:
    """The tenant a scoped API token is limited to (None: any). Set by the auth layer."""
    return request.get(SCOPE_KEY)
