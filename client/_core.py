"""Transport-independent parts of the client: request building, node rotation, answers.

`Client` (httpx) and `AsyncClient` (aiohttp, `_aio`) share everything here; they differ
only in how they send one request and how they sleep between attempts. An answer is
anything with httpx's `status_code`, `headers`, `content` and `text` (its body is parsed by
`_codec`).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Protocol

import httpx

from . import _codec
from .errors import ApiError, Overloaded, Unavailable

# Answers that mean "this node cannot serve now, another one (or a later try) may":
# 503 no_leader/unavailable, 502 from a proxy, 504 timeout (an ambiguous write is safe to
# repeat because it carries the same Idempotency-Key).
RETRY_STATUSES = frozenset({502, 503, 504})
# Final answers to a write that no retry, not even under a new key, may follow: 409
# `request_expired` (the key is past the cluster's request window, so whether an earlier
# try was applied can no longer be told; DESIGN 6, 7). A 409 is never retried (above);
# the completions outbox (_outbox.py) gives such a batch up rather than re-sending it.
FINAL_CODES = frozenset({"request_expired"})
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0
ERROR_TEXT_MAX_CHARS = 300     # of a non-JSON error body kept in an ApiError message
ERROR_CHARS_MAX = 4096         # the API's bound on a failure's error text
OVERLOAD_RETRIES_MAX = 3       # waits of Retry-After before an `overloaded` is raised
RETRY_AFTER_S_MAX = 60         # a Retry-After longer than this is taken as this


# Where tsctl, tsworker and the App find the cluster when they are not told (DESIGN 8).
URL_ENV, TOKEN_ENV, CA_FILE_ENV = "TSCTL_URL", "TSCTL_TOKEN", "TSCTL_CA_FILE"
DEFAULT_URLS = "http://127.0.0.1:8701,http://127.0.0.1:8702,http://127.0.0.1:8703"
URLS_CHARS_MAX = 65_536        # of a comma-separated URL list (TSCTL_URL, --url)
URLS_MAX = 64                  # node URLs in one list
_API_PATH = re.compile(r"/v1(/.*)?$")   # a URL that names the API, not the node


def parse_urls(urls: str | Iterable[str]) -> list[str]:
    """A list of base URLs, or one comma-separated string; trailing slashes dropped. A URL
    that ends in the API's prefix (`.../v1`) is refused with the base URL to give instead:
    the client adds `/v1/...` itself."""
    if isinstance(urls, str) and len(urls) > URLS_CHARS_MAX:
        raise ValueError(f"the node URLs are longer than {URLS_CHARS_MAX} characters")
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = [u.strip().rstrip("/") for u in items if u and u.strip()]
    if not out:
        raise ValueError("at least one node URL is needed")
    if len(out) > URLS_MAX:
        raise ValueError(f"more than {URLS_MAX} node URLs")
    for u in out:
        if not (u.startswith("http://") or u.startswith("https://")):
            raise ValueError(f"not an http(s) URL: {u!r}")
        scheme, _, rest = u.partition("://")
        host, slash, path = rest.partition("/")
        if _API_PATH.search(slash + path):
            base = f"{scheme}://{host}{_API_PATH.sub('', slash + path)}"
            raise ValueError(f"{u!r} names the API path: give the node's base URL, {base!r} "
                             f"(the client adds /v1/...; {URL_ENV}, --url)")
    return out


def env_or(value: str | None, name: str) -> str | None:
    """`value` when given, else the environment variable `name` (unset or empty: None)."""
    if value is not None:
        return value
    return os.environ.get(name) or None


# A write's Idempotency-Key carries when it was made (DESIGN 6): `tsched1-<ms>-<nonce>`,
# <ms> epoch milliseconds of this machine's clock, <nonce> 32 random hex digits. The
# cluster applies a retry of it once while it is younger than its request window (120 s
# by default) and refuses an older one `request_expired`, a final answer; so this
# machine's clock must be within 30 s of the cluster's. The state machine's parser of
# this format (statemachine/request_ids.py) is tested against this function.
KEY_FORMAT = "tsched1-{ms}-{nonce}"


def new_key(now_ms: int | None = None) -> str:
    """A fresh Idempotency-Key made at `now_ms` (epoch ms; default: now)."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return KEY_FORMAT.format(ms=ms, nonce=uuid.uuid4().hex)


def to_time(value: Any) -> Any:
    """Request times: datetimes become RFC 3339 UTC; numbers (epoch s) and strings pass."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetime: give a time zone")
        return value.astimezone(_dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return value


@dataclass
class Call:
    """One logical API request. `key` is fixed when the call is built, so every retry of a
    write carries the same Idempotency-Key and the cluster applies it at most once."""
    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    write: bool = False
    read_timeout_s: float | None = None   # a long-poll needs more than the default
    key: str | None = None
    deadline_s: float | None = None       # overrides the client's total deadline
    replica_read: bool = True             # a read of replicated state: takes min_seq
    minimal: bool = False                 # `Prefer: return=minimal`: brief answers
    to_leader: bool = False               # a claim: to the node its last answer named leader
    # Heartbeats: to that node first too (it keeps the worker's slot reports, DESIGN 14.4),
    # without moving where the other calls go.
    leader_first: bool = False

    def __post_init__(self) -> None:
        if self.write and self.key is None:
            self.key = new_key()
        self.params = {k: v for k, v in self.params.items() if v is not None}


LEADER_HEADER = "X-Tsched-Leader"   # a claim answer's: the leader's URL


class Rotation:
    """Which node to try next and how long to wait before trying.

    Sticks to the node that last answered; on failure moves to the next one. After a whole
    round of failures it backs off exponentially (capped), so a leaderless minute costs a few
    requests, not a busy loop."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.current = 0
        self.leader: str | None = None   # where claims go first: a claim answer named it

    def attempts(self, to_leader: bool = False) -> Iterator[tuple[str, float]]:
        """Yields (url, delay_s before this attempt) forever; the caller enforces the deadline.
        `to_leader` (claims, heartbeats): from the leader's URL when one of ours was named."""
        n = len(self.urls)
        start = self.current
        if to_leader and self.leader is not None:
            start = self.urls.index(self.leader)
        i = 0
        while True:
            new_round = i > 0 and i % n == 0
            delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (i // n - 1)) if new_round else 0.0
            yield self.urls[(start + i) % n], delay
            i += 1

    def success(self, url: str, to_leader: bool = False, leader: str | None = None,
                leader_first: bool = False) -> None:
        """`url` answered. A claim's answer names the leader's URL (`leader`): while that is
        one of ours, claims go there first and the other calls stay where they were (a
        `leader_first` call that the leader answered moves nothing)."""
        if leader_first and url == self.leader:
            return
        if to_leader:
            self.leader = leader if leader in self.urls else None
            if self.leader is not None:
                return
        self.current = self.urls.index(url)


class SeqTracker:
    """The highest `applied_seq` seen: reads send it as `min_seq` (read-your-writes on any node).

    In a cluster with several shards each answer names its `shard` (merged answers carry
    `applied_seqs` by shard), and sequences of different shards are unrelated: the tracker
    keeps the highest per shard and sends them as `shard:seq` pairs, from which a node
    takes what the read needs (DESIGN.md section 13)."""

    def __init__(self) -> None:
        self.seen = 0
        self.by_shard: dict[int, int] = {}

    def note(self, body: Any, headers: httpx.Headers | None = None) -> None:
        shard = None
        seq = None
        if isinstance(body, dict):
            seq, shard = body.get("applied_seq"), body.get("shard")
            many = body.get("applied_seqs")
            if isinstance(many, dict):
                for s, n in many.items():
                    self._note_shard(_int(s), _int(n))
        if headers is not None:
            if seq is None:
                seq = headers.get("x-applied-seq")
            if shard is None:
                shard = headers.get("x-tsched-shard")
        seq, shard = _int(seq), _int(shard)
        if shard is not None:
            self._note_shard(shard, seq)
        elif seq is not None and seq > self.seen:
            self.seen = seq

    def _note_shard(self, shard: int | None, seq: int | None) -> None:
        if shard is None or seq is None:
            return
        if seq > self.by_shard.get(shard, 0):
            self.by_shard[shard] = seq
        if seq > self.seen:
            self.seen = seq

    def min_seq(self) -> int | str:
        """What a read sends as `min_seq`: one number, or `shard:seq` pairs."""
        if not self.by_shard:
            return self.seen
        return ",".join(f"{s}:{n}" for s, n in sorted(self.by_shard.items()))


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def build_request(call: Call, url: str, token: str | None, min_seq: int | str
                  ) -> dict[str, Any]:
    """Keyword arguments for httpx's `request` for one attempt of `call` at node `url`."""
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    params = dict(call.params)
    if call.write:
        assert call.key is not None, "a write's key is made in Call.__post_init__"
        headers["Idempotency-Key"] = call.key
    elif min_seq and call.replica_read:
        params.setdefault("min_seq", min_seq)
    if call.minimal:
        headers["Prefer"] = "return=minimal"
    kwargs: dict[str, Any] = {"method": call.method, "url": url + call.path,
                              "headers": headers, "params": params}
    if call.body is not None:
        kwargs["content"] = json.dumps(call.body, separators=(",", ":"))
        headers["Content-Type"] = "application/json"
    return kwargs


class HttpAnswer(Protocol):
    """What this module reads of an answer: httpx's Response, or _aio's."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Any: ...
    @property
    def content(self) -> bytes: ...
    @property
    def text(self) -> str: ...


def decode(resp: HttpAnswer) -> Any:
    if not resp.content:
        return {}
    try:
        return _codec.loads(resp.content)
    except ValueError:
        return None


NO_ROUTE_HINT = (f"no such API path at this URL: is each node URL ({URL_ENV}, --url) a "
                 "tsched node's base URL, such as http://127.0.0.1:8701, without /v1?")


def error_from(resp: HttpAnswer, body: Any) -> ApiError:
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and err.get("code") == "overloaded":
        return Overloaded(str(err.get("message") or ""), err.get("details") or {},
                          retry_after_s(resp) or 1.0)
    if isinstance(err, dict) and err.get("code"):
        message, details = str(err.get("message") or ""), err.get("details") or {}
        if resp.status_code == 404 and _no_route(message, details):
            message = f"{message} ({NO_ROUTE_HINT})"
        return ApiError(str(err["code"]), message, details, resp.status_code)
    text = resp.text[:ERROR_TEXT_MAX_CHARS]
    if resp.status_code == 404:
        text = f"{text} ({NO_ROUTE_HINT})".strip()
    return ApiError(f"http_{resp.status_code}", text, {}, resp.status_code)


def _no_route(message: str, details: Any) -> bool:
    """A node's answer to a path it has no route for (its HTTP layer's own 404, DESIGN 7),
    not a 404 about a task, schedule or tenant: the URL's base is wrong. A node names it
    `details.reason = "no_route"`; a node from before that is known by aiohttp's message."""
    if not isinstance(details, dict):
        return False
    if "reason" in details:
        return details["reason"] == "no_route"
    return message == "Not Found" and details.get("status") == 404


def retry_after_s(resp: HttpAnswer) -> float | None:
    """A 429's `Retry-After` in seconds (DESIGN 14.2), capped; None when absent or bad."""
    if resp.status_code != 429:
        return None
    value = resp.headers.get("Retry-After", "")
    if not value.isdigit():
        return None
    return float(min(int(value), RETRY_AFTER_S_MAX))


def overload_wait_s(call: Call, resp: HttpAnswer, waited: int,
                    remaining_s: float) -> float | None:
    """How long to wait before sending an `overloaded` request again, or None: not an
    overload, out of retries (`OVERLOAD_RETRIES_MAX`), or past the call's deadline.

    A submit the state machine shed (reason `priority`) applied nothing; the retry takes a
    new key (safe: nothing was applied under the old one), because a node of the previous
    release recorded the refusal and would answer the old key with it again. A full queue proposed nothing and
    recorded nothing, so that retry keeps its key (an earlier try may have gone in)."""
    wait = retry_after_s(resp)
    if wait is None or waited >= OVERLOAD_RETRIES_MAX or wait >= remaining_s:
        return None
    details = (error_from(resp, decode(resp)).details or {})
    if details.get("reason") == "priority" and call.write:
        call.key = new_key()
    return wait


def is_retryable_status(resp: HttpAnswer) -> bool:
    return resp.status_code in RETRY_STATUSES


def unavailable(call: Call, last: str | None,
                failures: dict[str, str] | None = None) -> Unavailable:
    """`failures`: each node's last failure (url -> text). The message names the other
    nodes' when they differ from the last one: the last attempt of a deadline may only
    have had a sliver of time, and a node's own reason (a certificate the client does not
    trust, a refused connection) says more."""
    msg = f"no node answered {call.method} {call.path}"
    if last:
        others = [f"{url}: {text}" for url, text in (failures or {}).items() if text != last]
        msg += f" (last: {last}" + "".join(f"; {o}" for o in others) + ")"
    hint = unreachable_hint(failures or {})
    if hint:
        msg += f". {hint}"
    return Unavailable(msg, {"last_error": last, "by_node": dict(failures or {})})


# What a connect-stage failure's text says, and what to check (most specific first).
_CONNECT_HINTS = (
    ("wrong_version_number", "a node may speak plain http: try http:// instead of https://"),
    ("certificate_verify_failed", f"give the cluster's CA bundle ({CA_FILE_ENV}, --ca-file)"),
    ("name or service not known", "a host name does not resolve: is it spelt right?"),
    ("nodename nor servname", "a host name does not resolve: is it spelt right?"),
    ("temporary failure in name resolution",
     "a host name does not resolve: is it spelt right?"),
    ("connection refused", "nothing listens there; is the cluster running (tsctl dev) on "
                           "those ports?"),
)
_CONNECT_FAILURES = ("ConnectError", "ConnectTimeout", "ClientConnector", "ClientSSLError",
                     "SSLError")


def unreachable_hint(failures: dict[str, str]) -> str:
    """When no node could be connected to at all (every failure a connect-stage one), what
    to check: the URLs first, and the likely cause the failures show."""
    if not failures or not all(t.startswith(_CONNECT_FAILURES) for t in failures.values()):
        return ""
    text = " ".join(failures.values()).lower()
    causes = [hint for marker, hint in _CONNECT_HINTS if marker in text]
    cause = f": {causes[0]}" if causes else ""
    return f"Check the node URLs ({URL_ENV} or --url: {', '.join(failures)}){cause}"


def is_connect_failure(exc: Exception) -> bool:
    """No connection was made (refused, unresolvable, TLS handshake): the node never saw
    the request."""
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))


def describe_failure(exc: Exception | None, resp: HttpAnswer | None) -> str:
    if exc is not None:
        return f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_MAX_CHARS]
    assert resp is not None
    err = error_from(resp, decode(resp))
    return f"{resp.status_code} {err.code}"


TRANSPORT_ERRORS = (httpx.TransportError,)
