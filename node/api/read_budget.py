"""A node's budget of listing pages (DESIGN 7, "Task listings are bounded"; 14.2): one
client reading back to back gets a configured share of the node, not all of it.

A page of `GET /v1/tasks`, `GET /v1/workflows` or `GET /v1/audit` is bounded (it examines
at most `task_scan_max` tasks or `audit_scan_max` entries and renders at most `limit`
items), but it is answered on the node's event loop, under the lock the apply takes: a
client asking for the next page as soon as the last one arrives (about 1,500 a second at
1,000,000 tasks) took the loop from the submits beside it and raised their p99 eleven-fold
(bench/notes/2026-12-06-bounded-listings.md). So each page takes a token from a bucket of
`[limits] list_pages_per_s` tokens a second holding at most `list_burst_pages`:

- with a token left it is served at once;
- without one it waits for its turn (a reservation: the tokens go negative, each waiter
  owns the next one in order), when that turn comes within `list_wait_ms_max`;
- past that it is answered at once 429 `overloaded` (reason `read_budget`) and takes
  nothing; its Retry-After is the seconds after which, with no other reader, its wait
  would be within the bound (at least 1).

A client reading one page after another is therefore paced, never refused (the budget is
at least one page a second and the wait at most one second: its next page finds the
bucket at 0 or more); only concurrent readers past the burst and the queue are refused.
`list_pages_per_s = 0` turns the budget off. The bucket is the node's own (not
replicated): a follower serving reads has its own, and on a sharded node each shard
replica has its own, so a merged page costs one token of each shard it asks.
"""
from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from aiohttp import web

from tsched.statemachine.limits import API_LIMITS

from tsched.node.errors import ApiError


class ReadBudget:
    """A token bucket of listing pages with a bounded wait (reservations in arrival order).
    `clock` is injected for tests; the node uses `time.monotonic`."""

    def __init__(self, pages_per_s: float = API_LIMITS.list_pages_per_s,
                 burst_pages: int = API_LIMITS.list_burst_pages,
                 wait_ms_max: int = API_LIMITS.list_wait_ms_max,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pages_per_s = pages_per_s
        self.burst_pages = burst_pages
        self._wait_s_max = wait_ms_max / 1000
        self._clock = clock
        self._tokens = float(burst_pages)     # below 0: owed to the pages waiting
        self._at = clock()
        self.served = 0          # pages admitted at once
        self.waited = 0          # pages admitted after a wait
        self.refused = 0         # pages answered 429

    @property
    def enabled(self) -> bool:
        return self.pages_per_s > 0

    def tokens(self) -> float:
        """The tokens now (negative: owed to pages still waiting)."""
        now = self._clock()
        self._tokens = min(float(self.burst_pages),
                           self._tokens + (now - self._at) * self.pages_per_s)
        self._at = now
        return self._tokens

    def reserve(self) -> float:
        """Take a token: the seconds to wait for it (0: at once); raises 429 `overloaded`
        when that wait would be over `list_wait_ms_max` (nothing taken)."""
        if not self.enabled:
            return 0.0
        tokens = self.tokens()
        wait_s = 0.0 if tokens >= 1 else (1 - tokens) / self.pages_per_s
        if wait_s > self._wait_s_max:
            self.refused += 1
            retry_s = max(1, math.ceil(wait_s - self._wait_s_max))
            raise ApiError("overloaded", f"this node serves at most {self.pages_per_s:g} "
                           f"listing pages a second (burst {self.burst_pages}); try again "
                           "later", {"reason": "read_budget", "pages_per_s": self.pages_per_s,
                                     "burst_pages": self.burst_pages,
                                     "retry_after_s": retry_s})
        self._tokens = tokens - 1
        if wait_s:
            self.waited += 1
        else:
            self.served += 1
        return wait_s

    async def take(self) -> None:
        """Wait for this page's token (at most `list_wait_ms_max`), or raise 429."""
        wait_s = self.reserve()
        if wait_s:
            await asyncio.sleep(wait_s)   # the reserved token's time: pacing, not a sync


READ_BUDGET = web.AppKey("read_budget", ReadBudget)


async def take_page(request: web.Request) -> None:
    """A listing page's token from this node's budget (a 429 past it)."""
    await request.app[READ_BUDGET].take()
