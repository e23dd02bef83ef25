"""Admission of submits at the HTTP layer (DESIGN 14.2): a busy node answers at once.

The proposal queue bound (`proposals_waiting_max`) counts commands waiting for commit, but
under overload a CPU-starved node spends its time before a command reaches the proposer:
reading, parsing and validating requests that all wait their turn on the loop. So the
submit handler asks here first, before it reads the body: a node that already has
`submits_in_progress_max` submit requests in progress, or whose oldest one has waited
`submit_wait_ms_max`, answers 429 `overloaded` (reason `busy`, with Retry-After) instead
of queueing one more. Nothing was proposed, so a retry keeps its Idempotency-Key. Claims,
completions, heartbeats and reads never come here: they drain the load or cost little.
"""
from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from aiohttp import web

from tsched.statemachine.limits import API_LIMITS

from tsched.node.errors import ApiError


class Admission:
    """Submit requests in progress at this node, oldest first."""

    def __init__(self, *, in_progress_max: int = API_LIMITS.submits_in_progress_max,
                 wait_ms_max: int = API_LIMITS.submit_wait_ms_max,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._in_progress_max = in_progress_max
        self._wait_s_max = wait_ms_max / 1000
        self._clock = clock
        # Insertion-ordered: the first entry is the oldest submit still in progress. Its
        # size is bounded by in_progress_max (a submit over it is never added).
        self._started: dict[int, float] = {}
        self._ids = itertools.count()
        self.refused = 0          # submits answered `busy` since start (metrics, bench)

    @property
    def in_progress(self) -> int:
        return len(self._started)

    def oldest_wait_s(self, now: float | None = None) -> float:
        if not self._started:
            return 0.0
        now = self._clock() if now is None else now
        return now - next(iter(self._started.values()))

    @contextmanager
    def submit(self) -> Iterator[None]:
        """Hold one submit's place while it is served; raises `overloaded` when busy."""
        now = self._clock()
        self._check(now)
        key = next(self._ids)
        self._started[key] = now
        try:
            yield
        finally:
            del self._started[key]

    def _check(self, now: float) -> None:
        n = len(self._started)
        if n >= self._in_progress_max:
            self._refuse(f"this node has {n} submits in progress (at most "
                         f"{self._in_progress_max})", in_progress=n,
                         in_progress_max=self._in_progress_max)
        waited_s = self.oldest_wait_s(now)
        if waited_s >= self._wait_s_max:
            self._refuse(f"this node's oldest submit in progress has waited "
                         f"{waited_s * 1000:.0f} ms (at most {self._wait_s_max * 1000:.0f})",
                         in_progress=n, oldest_wait_ms=int(waited_s * 1000))

    def _refuse(self, message: str, **details: int) -> None:
        self.refused += 1
        raise ApiError("overloaded", f"{message}; try again later",
                       {"reason": "busy", **details,
                        "retry_after_s": API_LIMITS.busy_retry_after_s})


ADMISSION = web.AppKey("admission", Admission)


def admission_of(request: web.Request) -> Admission:
    return request.app[ADMISSION]
