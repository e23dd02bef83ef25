"""The router's aiohttp application: the handlers of keyed_routes.py, claim_fanout.py and merge.py
under one error middleware (a relayed shard answer passes as it is; everything else gets
the node's error shape), and the upstream connections opened and closed with the app.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web
from aiohttp.typedefs import Handler

from tsched.node.api.jsonio import error_response, http_error
from tsched.node.api.validate import BODY_BYTES_MAX
from tsched.node.errors import ApiError
from tsched.node.shards import archive_route
from tsched.node.shards import claim_fanout as router_claims
from tsched.node.shards import limit_routes, members_routes, pause_routes, session_routes
from tsched.node.shards import merge as router_merge
from tsched.node.shards import keyed_routes as router_routes
from tsched.node.shards.router import ROUTER, Relayed, Router, as_response

log = logging.getLogger("tsched.node.router")


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Relayed as e:
        return as_response(e.answer)
    except ApiError as e:
        return error_response(e, None)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        resp = error_response(http_error(request, e), None)
        resp.set_status(e.status)
        return resp
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("event=http_500 method=%s path=%s", request.method, request.path)
        return error_response(ApiError("internal", "internal error (a bug; see the log)"), None)


def make_router_app(router: Router) -> web.Application:
    app = web.Application(client_max_size=BODY_BYTES_MAX, middlewares=[error_middleware])
    app[ROUTER] = router
    app.router.add_routes(router_routes.routes)
    app.router.add_routes(router_claims.routes)
    app.router.add_routes(router_merge.routes)
    app.router.add_routes(archive_route.routes)
    app.router.add_routes(members_routes.routes)
    app.router.add_routes(limit_routes.routes)
    app.router.add_routes(pause_routes.routes)
    app.router.add_routes(session_routes.routes)
    app.router.add_route("*", "/{tail:.*}", router_routes.to_any_shard)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await router.up.start()
        yield
        await router.up.close()
    app.cleanup_ctx.append(lifecycle)
    return app
