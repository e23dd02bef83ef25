"""How many tasks a Worker holds and how many claims it keeps open, from what it observes.

Slow handlers (or an idle queue) keep the window at `concurrency + claim_ahead` (by default
4 x concurrency, like Celery's prefetch multiplier): leases that other workers could run are
not hoarded. Fast handlers grow it to what they finish during two claim round trips (the
pipe's rate x round trip, doubled to ride out variance), up to `held_max`, with up to
CLAIMS_OPEN_MAX claims of up to 100 tasks overlapping: one Worker process is then limited
by the cluster or its handlers, not by waiting for a round trip.

All of that only while claims come back full (`backlog`: there is more work than asked
for). Under a trickle of due tasks the worker claims as it always did (two claims open,
each for whatever is free, completions sent apart): more claims or bigger entries there
only lengthen every commit, and with it the lateness of each task (bench.lateness).
"""
from __future__ import annotations

import math
import time
from typing import Callable

CLAIM_TASKS_MAX = 100      # the API's bound on one claim
CLAIMS_OPEN_MIN = 2        # enough to hide one round trip behind the handlers' work
CLAIMS_OPEN_MAX = 6        # a node lets one worker id hold 16 waiting claims
HELD_MAX_DEFAULT = 1000    # tasks held at most, whatever the rate (memory: payloads)
RATE_PERIOD_S = 0.1        # handler returns are counted this long per rate sample
EWMA_WEIGHT = 0.5          # of the newest sample
PIPE_FACTOR = 2.0          # round trips' worth of handler work held ahead


def _ewma(old: float, new: float) -> float:
    return new if old == 0 else old + EWMA_WEIGHT * (new - old)


class Window:
    def __init__(self, concurrency: int, claim_ahead: int, held_max: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.concurrency = concurrency
        self.floor = concurrency + claim_ahead
        self.held_max = max(self.floor, held_max)
        self.rate_per_s = 0.0      # handler returns per second
        self.rtt_s = 0.0           # round trip of a claim that did not wait for work
        self.backlog = False       # the last claim came back full
        self._clock = clock
        self._count = 0
        self._since = clock()

    def handler_done(self) -> None:
        self._count += 1
        now = self._clock()
        span = now - self._since
        if span >= RATE_PERIOD_S:
            self.rate_per_s = _ewma(self.rate_per_s, self._count / span)
            self._count, self._since = 0, now

    def claim_answered(self, rtt_s: float, got: int, want: int) -> None:
        """Only a claim that came back full times the pipe: one that got less may have
        waited for work (a long poll), which says nothing about the round trip."""
        self.backlog = want > 0 and got >= want
        if self.backlog:
            self.rtt_s = _ewma(self.rtt_s, rtt_s)

    @property
    def size(self) -> int:
        """Tasks to hold (claimed, running or about to run)."""
        ahead = PIPE_FACTOR * self.rate_per_s * self.rtt_s
        return int(min(self.held_max, max(self.floor, self.concurrency + ahead)))

    @property
    def claims_open_max(self) -> int:
        if not self.backlog:
            return CLAIMS_OPEN_MIN
        extra = max(0, self.size - self.floor)
        return min(CLAIMS_OPEN_MAX, CLAIMS_OPEN_MIN + math.ceil(extra / CLAIM_TASKS_MAX))

    def claim_size(self, free: int, open_claims: int) -> int:
        """How many to ask for now (0: wait for more room). With a claim already open, a
        claim waits until it can ask for its share of the window: many small claims cost
        the cluster a command each for little work."""
        want = min(free, CLAIM_TASKS_MAX)
        if open_claims == 0 or not self.backlog:
            return max(want, 0)
        share = max(1, (self.size - self.concurrency) // self.claims_open_max)
        return want if want >= min(share, CLAIM_TASKS_MAX) else 0
