"""Bearer-token authentication and tenant scoping (DESIGN.md section 7, SECURITY.md).

With an `[auth]` section in cluster.toml every request but the open ones (health, readiness,
the dashboard's static page, the OpenAPI document) needs `Authorization: Bearer T`:

    [auth]
    admin_token_sha256 = ["<hex>"]              # everything
    metrics_token_sha256 = ["<hex>"]            # optional: GET /metrics only (a scraper)
    [auth.tenant_token_sha256]
    acme = ["<hex>", "<hex>"]                   # acme's tasks, schedules and claims only

Only SHA-256 digests are stored, so the file gives no token away; a presented token is
hashed and compared with every digest in constant time. A tenant token sets
`request[SCOPE_KEY]`, which handlers pass into reads and commands; this module refuses
what no tenant token may do at all (tenant settings, cluster operations, metrics).
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import re
from dataclasses import dataclass, field
from typing import Mapping

from aiohttp import web
from aiohttp.typedefs import Handler

from tsched.node.api.scope import ACTOR_KEY, SCOPE_KEY
from tsched.node.config import ClusterConfig
from tsched.node.services import NODE
from tsched.node.errors import ApiError

log = logging.getLogger("tsched.node.auth")

TOKEN_CHARS_MAX = 1024          # longer Authorization values are refused before hashing
DIGESTS_MAX = 20_000            # digests in the whole [auth] section
LINEAR_SCAN_MAX = 64            # up to this many digests, every one is compared per request
TENANT_CHARS_MAX = 64

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TENANT_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_KEYS = ("admin_token_sha256", "tenant_token_sha256", "metrics_token_sha256")

# Reachable without a token: liveness/readiness probes, and the dashboard's page and assets
# (they hold no data; every API call the dashboard makes carries the token typed into it).
OPEN_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/", "/v1/openapi.json"})
OPEN_PREFIXES = ("/static/",)
METRICS_PATH = "/metrics"
TIMESERIES_PATH = "/v1/timeseries"   # the dashboard's graphs: cluster-wide counts
ARCHIVE_PATH = "/v1/archive"         # the audit archive (DESIGN 14.3)


class AuthConfigError(ValueError):
    """The [auth] section is malformed; the message says where."""


@dataclass(frozen=True)
class Identity:
    kind: str                   # "admin" | "tenant" | "metrics" | "peer" (a node)
    tenant: str | None = None

    @property
    def name(self) -> str:
        return f"tenant:{self.tenant}" if self.kind == "tenant" else self.kind


@dataclass(frozen=True)
class Auth:
    """The parsed [auth] section: (digest bytes, identity) pairs."""

    entries: tuple[tuple[bytes, Identity], ...]
    _by_digest: dict[bytes, Identity] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_digest", dict(self.entries))

    def identify(self, token: str) -> Identity | None:
        """The token's identity, or None.

        Few digests (the usual case): each is compared with `hmac.compare_digest` and the
        scan never stops early, so timing says nothing about which digest matched or how
        closely. Many (thousands of tenant tokens): a dict lookup keyed by the digest, so a
        request costs the same whatever the count; Python's per-process keyed hashing and
        the SHA-256 in between leave an attacker nothing to learn a token from."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        if len(self.entries) > LINEAR_SCAN_MAX:
            return self._by_digest.get(digest)
        found = None
        for known, identity in self.entries:
            if hmac.compare_digest(known, digest) and found is None:
                found = identity
        return found


def parse(raw: Mapping[str, object] | None) -> Auth | None:
    """cluster.toml's [auth] table -> Auth (None when there is no [auth])."""
    if raw is None:
        return None
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise AuthConfigError(f"[auth] unknown keys: {', '.join(unknown)} "
                              f"(known: {', '.join(_KEYS)})")
    entries = [(d, Identity("admin"))
               for d in _digests(raw.get("admin_token_sha256"), "admin_token_sha256")]
    entries += [(d, Identity("metrics"))
                for d in _digests(raw.get("metrics_token_sha256"), "metrics_token_sha256")]
    tenants = raw.get("tenant_token_sha256", {})
    if not isinstance(tenants, Mapping):
        raise AuthConfigError("[auth.tenant_token_sha256] must be a table: tenant = [digests]")
    for tenant in sorted(tenants):
        if not isinstance(tenant, str) or not _TENANT_RE.match(tenant):
            raise AuthConfigError(f"[auth.tenant_token_sha256] {tenant!r} is not a tenant name "
                                  f"(1..{TENANT_CHARS_MAX} of A-Z a-z 0-9 _ . -)")
        where = f"tenant_token_sha256.{tenant}"
        entries += [(d, Identity("tenant", tenant)) for d in _digests(tenants[tenant], where)]
    if not entries:
        raise AuthConfigError("[auth] lists no token digests: nobody could use the API")
    if len(entries) > DIGESTS_MAX:
        raise AuthConfigError(f"[auth] lists {len(entries)} digests; the limit is {DIGESTS_MAX}")
    seen: dict[bytes, Identity] = {}
    for digest, identity in entries:
        if seen.setdefault(digest, identity) != identity:
            raise AuthConfigError(f"[auth] one token digest is listed for both "
                                  f"{seen[digest].name} and {identity.name}")
    return Auth(entries=tuple(entries))


def _digests(value: object, where: str) -> list[bytes]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise AuthConfigError(f"[auth] {where} must be a list of SHA-256 hex digests")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _HEX64.match(item.lower()):
            raise AuthConfigError(f"[auth] {where}[{i}] is not a SHA-256 hex digest "
                                  "(64 hex digits: `printf %s TOKEN | sha256sum`)")
        out.append(bytes.fromhex(item))
    return out


def digest_of(token: str) -> str:
    """The hex digest to put in cluster.toml for `token`."""
    return hashlib.sha256(token.encode()).hexdigest()


# --- peers: one node reading another's members (api/member_probe.py) ---------------------

# A node holds no token (only digests), so a node that asks its peers whether it is still a
# member (DESIGN 6.2) signs its request with the cluster secret, which every node has: the
# header `X-Tsched-Peer: <node id>:<unix s>:<hex HMAC-SHA256>` over the cluster name, node
# id, time, method and path. It opens PEER_PATHS only, within PEER_STAMP_SKEW_S of the
# receiver's clock (a copied header is good for minutes, for a read of the members).
PEER_HEADER = "X-Tsched-Peer"
PEER_PATHS = frozenset({("GET", "/v1/cluster/members")})
PEER_STAMP_SKEW_S = 300


def _peer_mac(secret: str, cluster: str, node_id: str, stamp_s: int, method: str,
              path: str) -> str:
    text = f"tsched-peer-v1\n{cluster}\n{node_id}\n{stamp_s}\n{method} {path}"
    return hmac.new(secret.encode(), text.encode(), hashlib.sha256).hexdigest()


def peer_headers(cfg: ClusterConfig, node_id: str, now_ms: int,
                 path: str) -> dict[str, str] | None:
    """The headers of a GET of `path` from this node to a peer: signed when the cluster
    has [auth] and a secret; None without [auth] (none needed) or without a secret (none
    can be made: the peer answers 401)."""
    if cfg.auth is None or not cfg.secret:
        return None
    stamp_s = now_ms // 1000
    mac = _peer_mac(cfg.secret, cfg.name, node_id, stamp_s, "GET", path)
    return {PEER_HEADER: f"{node_id}:{stamp_s}:{mac}"}


def _peer(request: web.Request) -> Identity:
    """The identity of a request signed by a peer (PEER_HEADER), or 401/403."""
    node = request.app[NODE]
    cfg = node.config
    node_id, _, rest = request.headers[PEER_HEADER].strip().partition(":")
    stamp, _, mac = rest.partition(":")
    if not cfg.secret or not stamp.isdigit() or len(stamp) > 12 or len(mac) != 64:
        raise ApiError("unauthenticated", f"{PEER_HEADER} is not a valid peer credential")
    if abs(node.clock.now_ms() // 1000 - int(stamp)) > PEER_STAMP_SKEW_S:
        raise ApiError("unauthenticated", f"{PEER_HEADER} is stale (more than "
                       f"{PEER_STAMP_SKEW_S} s from this node's clock)")
    want = _peer_mac(cfg.secret, cfg.name, node_id, int(stamp), request.method, request.path)
    if not hmac.compare_digest(want, mac.lower()):
        raise ApiError("unauthenticated", f"{PEER_HEADER} is not signed by this cluster")
    if (request.method, request.path) not in PEER_PATHS:
        raise ApiError("forbidden", "a peer credential may only read GET /v1/cluster/members")
    return Identity("peer")


# --- the middleware -----------------------------------------------------------------------

AUTH: web.AppKey[Auth | None] = web.AppKey("auth")    # the parsed [auth] of this node


def setup(app: web.Application) -> None:
    """Parse the node's [auth] once and mount the middleware (app.py calls this)."""
    app[AUTH] = parse(getattr(app[NODE].config, "auth", None))
    app.middlewares.append(middleware)


@web.middleware
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    auth = request.app[AUTH]
    if auth is None or _is_open(request.path):
        return await handler(request)
    if PEER_HEADER in request.headers and "Authorization" not in request.headers:
        identity: Identity | None = _peer(request)
    else:
        identity = auth.identify(_bearer(request))
    if identity is None:
        raise ApiError("unauthenticated", "the bearer token is not known to this cluster")
    _authorize(request, identity)
    request[ACTOR_KEY] = identity.name
    if identity.kind == "tenant":
        assert identity.tenant is not None, "parse() gives every tenant identity its tenant"
        request[SCOPE_KEY] = identity.tenant
    return await handler(request)


def _is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def _bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization")
    if header is None:
        raise ApiError("unauthenticated", "this cluster needs `Authorization: Bearer <token>`")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise ApiError("unauthenticated", "the Authorization header must be `Bearer <token>`")
    if len(token) > TOKEN_CHARS_MAX:
        raise ApiError("unauthenticated", f"the token is longer than {TOKEN_CHARS_MAX} characters")
    return token


def _authorize(request: web.Request, identity: Identity) -> None:
    """Refuse what this kind of token may never do; per-tenant checks live in handlers."""
    if identity.kind in ("admin", "peer"):     # a peer's one path is checked by _peer
        return
    path = request.path
    if identity.kind == "metrics":
        if path != METRICS_PATH:
            raise ApiError("forbidden", "a metrics token may only read /metrics")
        return
    if _admin_only(request.method, path):
        raise ApiError("forbidden", f"{request.method} {path} needs an admin token",
                       {"tenant": identity.tenant})


def _admin_only(method: str, path: str) -> bool:
    if path in (METRICS_PATH, TIMESERIES_PATH, "/v1/cluster") or path.startswith("/v1/cluster/"):
        return True     # cluster-wide figures, node addresses, leadership changes
    if path == ARCHIVE_PATH:
        return True     # the audit archive: every tenant's evicted tasks in one file
    if path.startswith("/v1/tenants/") and method not in ("GET", "HEAD"):
        return True     # caps and weights decide fairness between tenants
    if path.startswith("/v1/limits/") and method not in ("GET", "HEAD"):
        return True     # a keyed limit binds every tenant that names it
    if path.startswith("/v1/queues/") and method not in ("GET", "HEAD"):
        return True     # a pause by task type stops every tenant's tasks of that type
    return False
