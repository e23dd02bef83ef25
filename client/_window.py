"""How many tasks a Worker holds and how many claims it keeps open, from what it observes.

Slow handlers (or an idle queue) keep the window at `concurrency + claim_ahead` (by default
4 x concurrency, like Celery's prefetch multiplier): leases that other workers could run are
not hoarded. Fast handlers grow it to what they finish during two claim round trips (their
rate x round trip, doubled to ride out variance), up to `held_max`, with up to
CLAIMS_OPEN_MAX claims of up to 100 tasks overlapping: one Worker process is then limited
by the cluster or its handlers, not by waiting for a round trip.

While claims come back full, the handlers' rate is counted over the time they had work
(`fed_rate_per_s`: returns per second of some handler holding a task), not over the wall
clock: a window too small for the pipe starves the handlers between claims, and a rate over
the wall clock then measures the window (window / round trip), so the window only doubled
per sample, 16 to 1,000 in about half a second of a 3-second drain. The rate while fed is
what the handlers can do. Slow handlers are busy all the time: for them both rates are the
same. So that one full claim of a small backlog does not make the window jump to `held_max`
at once, it grows at most SLOW_START_GROWTH-fold per claim that comes back full (16, 64,
256, 1,000: a few round trips), and starts again from its floor after a short claim.

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
SLOW_START_GROWTH = 4      # the window's bound grows this much per claim that came back full


def _ewma(old: float, new: float) -> float:
    return new if old == 0 else old + EWMA_WEIGHT * (new - old)


class Window:
    def __init__(self, concurrency: int, claim_ahead: int, held_max: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.concurrency = concurrency
        self.floor = concurrency + claim_ahead
        self.held_max = max(self.floor, held_max)
        self.rate_per_s = 0.0      # handler returns per second of wall clock
        self.fed_rate_per_s = 0.0  # handler returns per second while some handler had work
        self.rtt_s = 0.0           # round trip of a claim that did not wait for work
        self.backlog = False       # the last claim came back full
        self._clock = clock
        self._count = 0
        self._since = clock()
        self._holding = 0          # tasks handed to handlers and not returned
        self._fed_since = 0.0      # when _holding last rose from 0
        self._fed_s = 0.0          # time with _holding > 0 in this rate period, before that
        self._bound = self.floor   # the window's size at most, under a backlog (slow start)

    def handler_started(self) -> None:
        """A claimed task handed to its handler (or to wait for its run_at)."""
        if self._holding == 0:
            self._fed_since = self._clock()
        self._holding += 1

    def handler_done(self) -> None:
        self._count += 1
        now = self._clock()
        if self._holding > 0:
            self._holding -= 1
            if self._holding == 0:
                self._fed_s += now - self._fed_since
        span = now - self._since
        # The first sample as soon as the first tasks are all done: the window starts at
        # its floor, and waiting RATE_PERIOD_S for a rate left it there for that long.
        first = self.fed_rate_per_s == 0 and self._holding == 0 and self._fed_s > 0
        if span >= RATE_PERIOD_S or first:
            fed_s = self._fed_s + (now - self._fed_since if self._holding else 0.0)
            self.rate_per_s = _ewma(self.rate_per_s, self._count / span)
            # A period without handler_started calls (fed_s 0) counts as fed throughout.
            fed = self._count / fed_s if fed_s > 0 else self._count / span
            self.fed_rate_per_s = _ewma(self.fed_rate_per_s, fed)
            self._count, self._since, self._fed_s, self._fed_since = 0, now, 0.0, now

    def claim_answered(self, rtt_s: float, got: int, want: int) -> None:
        """Only a claim that came back full times the pipe: one that got less may have
        waited for work (a long poll), which says nothing about the round trip."""
        self.backlog = want > 0 and got >= want
        if self.backlog:
            self.rtt_s = _ewma(self.rtt_s, rtt_s)
            self._bound = min(self.held_max, self._bound * SLOW_START_GROWTH)
        else:
            self._bound = self.floor

    @property
    def size(self) -> int:
        """Tasks to hold (claimed, running or about to run). Under a backlog, what the
        handlers finish in two round trips when fed; otherwise the wall-clock rate's."""
        if self.backlog:
            rate, most = max(self.rate_per_s, self.fed_rate_per_s), self._bound
        else:
            rate, most = self.rate_per_s, self.held_max
        ahead = PIPE_FACTOR * rate * self.rtt_s
        return int(min(most, max(self.floor, self.concurrency + ahead)))

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
