"""Request ids from Idempotency-Keys, and the client time they carry (DESIGN sections 6, 7).

Pure (no clock, no I/O): the node's handler derives a command's `request_id` with
`request_ids_for`, and the state machine reads the time back with `request_time_ms`.

- A *timed key* is what tsched's client sends: `tsched1-<ms>-<nonce>`, `<ms>` the key's
  creation time in epoch milliseconds (ASCII digits, at most 16), `<nonce>` anything
  non-empty (the client's: 32 hex digits). `key_time_ms` reads it; any other key is
  untimed.
- A request id is `"idem-" + SHA-256(scope, method, path, key, suffix)` in hex, and for a
  timed key `"idem-<ms>-" + that digest`: at most 5 + 16 + 1 + 64 = 86 characters (plus a
  claim's `.N`), within `Limits.id_chars_max`. The digest of an untimed key is the id of
  earlier releases, byte for byte.
- `request_time_ms(request_id)` is the `<ms>` of a timed id, else None (untimed ids, ids the
  node made, which are 32 hex digits).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable

KEY_PREFIX = "tsched1-"          # a timed Idempotency-Key, format 1
ID_PREFIX = "idem-"              # a request id derived from an Idempotency-Key
TIME_DIGITS_MAX = 16             # epoch ms up to 10**16 - 1 (the year 318857)


def _digits_ms(text: str) -> int | None:
    """`text` as epoch ms when it is 1 to TIME_DIGITS_MAX ASCII digits, else None
    (`str.isdigit` alone accepts other scripts' digits)."""
    if not 0 < len(text) <= TIME_DIGITS_MAX or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def key_time_ms(key: str) -> int | None:
    """The creation time (epoch ms) a timed Idempotency-Key carries, or None."""
    if not key.startswith(KEY_PREFIX):
        return None
    parts = key[len(KEY_PREFIX):].split("-", 1)
    if len(parts) != 2 or not parts[1]:
        return None
    return _digits_ms(parts[0])


def request_ids_for(scope: str, method: str, path: str, key: str) -> Callable[[str], str]:
    """`request_id(suffix)` for the items of one request (`#i`, `#claim`): the request's
    part of the digest is joined once. The node calls it with the caller's tenant scope
    ("" when none), the HTTP method, the path and the Idempotency-Key as sent."""
    head = "\n".join((scope, method, path, key))
    ms = key_time_ms(key)
    prefix = ID_PREFIX if ms is None else f"{ID_PREFIX}{ms}-"
    sha256 = hashlib.sha256

    def request_id(suffix: str) -> str:
        return prefix + sha256((head + suffix).encode("utf-8", "surrogatepass")).hexdigest()
    return request_id


def request_time_ms(request_id: str) -> int | None:
    """The client time a request id derived from a timed key carries, or None."""
    if not request_id.startswith(ID_PREFIX):
        return None
    parts = request_id[len(ID_PREFIX):].split("-", 1)
    if len(parts) != 2:
        return None
    return _digits_ms(parts[0])
