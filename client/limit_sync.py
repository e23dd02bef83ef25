"""Puts an app's keyed limits (`App.limit`), idempotently: what `tsworker` does when it
starts, before its schedules. A limit already declared alike is not written again (every
worker of a fleet starts with the same declarations: rewriting would make one Raft entry,
and an audit entry, each)."""
from __future__ import annotations

import logging
from typing import Any

from .client import Client
from .errors import ApiError

log = logging.getLogger("tsched.tsworker")
FIELDS = ("rate", "per_s", "concurrency", "partition_by")


def sync_limits(client: Client, declared: dict[str, dict[str, Any]]) -> list[str]:
    """Put each declared limit that is missing or differs; the names written."""
    written = []
    for name in sorted(declared):
        want = declared[name]
        try:
            have = client.get_limit(name)
        except ApiError as exc:
            if exc.code != "not_found":
                raise
            have = None
        if have is not None and all(have.get(k) == want.get(k) for k in FIELDS):
            continue
        client.put_limit(name, **{k: want.get(k) for k in FIELDS})
        log.info("limit %s %s: %s", name, "changed" if have else "declared",
                 ", ".join(f"{k}={want[k]}" for k in FIELDS if want.get(k) is not None))
        written.append(name)
    return written
