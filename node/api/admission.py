"""Admission of submits at the HTTP layer (DESIGN 14.2): a busy node answers at once, but
overload keeps the urgent (DESIGN 5.1).

The proposal queue bound (`proposals_waiting_max`) counts commands waiting for commit, but
under overload a CPU-starved node spends its time before a command reaches the proposer:
reading, parsing and validating requests that all wait their turn on the loop. So the
submit handler asks here first, before it reads the body. Two bounds, each on the submits
in progress (`submits_in_progress_max`) and on the wait of the oldest one
(`submit_wait_ms_max`):

- under the soft bound a submit is admitted;
- between the soft bound and the hard one (`urgent_bound_factor` times the soft) its body
  is read, and it is admitted only if every task in it is urgent (priority at most
  `urgent_priority_max`): `Place.admit`; otherwise it is refused as below;
- past the hard bound it is refused before its body is read.

A refusal is 429 `overloaded` (reason `busy`, with Retry-After). Nothing was proposed, so
a retry keeps its Idempotency-Key. Claims, completions, heartbeats and reads never come
here: they drain the load or cost little. The refusals of this node's submits are counted
here by (reason, tier) for /metrics: `busy` per request (its most urgent task's tier, or
`unknown` when refused before its body was read), `queue_full` per task (its own tier).
"""
from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

from aiohttp import web

from tsched.statemachine.limits import API_LIMITS
from tsched.statemachine.tiers import DEFAULT_TIERS, Tier, tier_of

from tsched.node.errors import ApiError
from tsched.node.ops.counters import UNKNOWN_TIER

Refusal = tuple[str, dict[str, int]]      # (message, details) of a `busy` answer


class Admission:
    """Submit requests in progress at this node, oldest first."""

    def __init__(self, *, in_progress_max: int = API_LIMITS.submits_in_progress_max,
                 wait_ms_max: int = API_LIMITS.submit_wait_ms_max,
                 urgent_priority_max: int = API_LIMITS.urgent_priority_max,
                 urgent_bound_factor: int = API_LIMITS.urgent_bound_factor,
                 tiers: tuple[Tier, ...] = DEFAULT_TIERS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._in_progress_max = in_progress_max
        self._wait_s_max = wait_ms_max / 1000
        self.urgent_priority_max = urgent_priority_max
        self._factor = urgent_bound_factor
        self.tiers = tiers
        self._clock = clock
        # Insertion-ordered: the first entry is the oldest submit still in progress. Its
        # size is bounded by the hard bound (a submit over it is never added).
        self._started: dict[int, float] = {}
        self._ids = itertools.count()
        self.shed: dict[tuple[str, str], int] = {}   # (reason, tier) -> refused (metrics)

    @property
    def in_progress(self) -> int:
        return len(self._started)

    @property
    def refused(self) -> int:
        """Submits answered `busy` since start (bench, tests)."""
        return sum(n for (reason, _), n in self.shed.items() if reason == "busy")

    def oldest_wait_s(self, now: float | None = None) -> float:
        if not self._started:
            return 0.0
        now = self._clock() if now is None else now
        return now - next(iter(self._started.values()))

    @contextmanager
    def submit(self) -> Iterator[Place]:
        """Hold one submit's place while it is served; raises `overloaded` past the hard
        bound. Between the bounds the place refuses, at `admit`, a submit that is not
        urgent. A `queue_full` refusal raised inside is counted on its way out."""
        now = self._clock()
        soft = self._over(now, 1)
        if soft is not None:
            hard = self._over(now, self._factor)
            if hard is not None:
                self.refuse(hard, UNKNOWN_TIER)
        place = Place(self, soft)
        key = next(self._ids)
        self._started[key] = now
        try:
            yield place
        except ApiError as e:
            if e.code == "overloaded" and e.details.get("reason") == "queue_full":
                for p in place.priorities:
                    self.count("queue_full", tier_of(p, self.tiers).name)
            raise
        finally:
            del self._started[key]

    def _over(self, now: float, factor: int) -> Refusal | None:
        """Why a submit arriving now is past `factor` times the bounds, or None."""
        n, bound = len(self._started), self._in_progress_max * factor
        if n >= bound:
            return (f"this node has {n} submits in progress (at most {bound})",
                    {"in_progress": n, "in_progress_max": bound})
        waited_s, wait_s_max = self.oldest_wait_s(now), self._wait_s_max * factor
        if waited_s >= wait_s_max:
            return (f"this node's oldest submit in progress has waited {waited_s * 1000:.0f} "
                    f"ms (at most {wait_s_max * 1000:.0f})",
                    {"in_progress": n, "oldest_wait_ms": int(waited_s * 1000)})
        return None

    def refuse(self, refusal: Refusal, tier: str) -> None:
        message, details = refusal
        self.count("busy", tier)
        raise ApiError("overloaded", f"{message}; try again later",
                       {"reason": "busy", **details,
                        "retry_after_s": API_LIMITS.busy_retry_after_s})

    def count(self, reason: str, tier: str) -> None:
        key = (reason, tier)
        self.shed[key] = self.shed.get(key, 0) + 1


class Place:
    """One submit's place at the node, from before its body is read to its answer."""

    __slots__ = ("_admission", "_refusal", "priorities", "urgent")

    def __init__(self, admission: Admission, refusal: Refusal | None) -> None:
        self._admission = admission
        self._refusal = refusal        # past the soft bound: why, if it is not urgent
        self.priorities: Sequence[int] = ()
        self.urgent = False

    def admit(self, priorities: Sequence[int]) -> None:
        """The body is read: its tasks' priorities. Past the soft bound, a submit with a
        task that is not urgent is refused `busy` (its most urgent task's tier counted)."""
        a = self._admission
        self.priorities = priorities
        self.urgent = max(priorities) <= a.urgent_priority_max
        if self._refusal is not None and not self.urgent:
            a.refuse(self._refusal, tier_of(min(priorities), a.tiers).name)


ADMISSION = web.AppKey("admission", Admission)


def admission_of(request: web.Request) -> Admission:
    return request.app[ADMISSION]
