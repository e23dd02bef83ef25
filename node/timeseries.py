"""The last hour of a node's activity, for the dashboard's graphs (DESIGN 14.5).

A ring of `POINTS_MAX` one-second points, fixed in size when the node starts (arrays of
ints: about 100 KiB, whatever the load). Once a second a sampler takes the difference of
the metrics' cumulative counters (submitted, completed, failed attempts, dead-lettered,
the lateness histogram's buckets) and the current queue depth (pending tasks), so the
apply path does no work for the graphs at all. Reads return columns, per second or summed
per minute; lateness p50/p99 are interpolated in the histogram's buckets, as Prometheus'
`histogram_quantile` does.

Every replica applies the same commands, so every node of a shard draws the same counts.
"""
from __future__ import annotations

import asyncio
import time
from array import array
from typing import Any, Callable

from .metrics import LATENESS_BUCKETS_S, NodeMetrics

POINTS_MAX = 3600              # one hour of one-second points
STEPS_S = (1, 60)              # per second, or summed per minute
COUNTS = ("submitted", "completed", "failed", "dead_lettered")
_EVENT_OF = {"submitted": "submitted", "completed": "completed", "failed": "failed",
             "dead_lettered": "dead"}
_BUCKETS = len(LATENESS_BUCKETS_S) + 1        # the last one is +Inf
NOT_SAMPLED = -1
SAMPLE_DELAY_S = 0.005         # wake just after the second turns, never just before


class TimeSeries:
    """The ring. `sample` is called once a second by one task; `read` by request handlers
    (both on the event loop, so no lock is needed)."""

    def __init__(self, metrics: NodeMetrics, points_max: int = POINTS_MAX) -> None:
        self._m = metrics
        self.points_max = points_max
        self._stamp = array("q", [NOT_SAMPLED]) * points_max     # the second in each slot
        self._counts = {name: array("q", [0]) * points_max for name in COUNTS}
        self._depth = array("q", [NOT_SAMPLED]) * points_max
        self._lateness = array("q", [0]) * (points_max * _BUCKETS)
        self._claimed = array("q", [0]) * points_max       # lateness observations per slot
        self._last: tuple[list[int], list[int]] | None = None

    def _cumulative(self) -> tuple[list[int], list[int]]:
        events = self._m.events
        return ([getattr(events, _EVENT_OF[n]) for n in COUNTS], list(self._m.lateness.counts))

    def sample(self, now_s: int, queue_depth: int | None) -> None:
        """Record what happened since the previous sample in the point of second `now_s`."""
        counts, lateness = self._cumulative()
        # The first point holds what the counters counted before it, since the node started:
        # the graphs add up to the /metrics counters.
        last = self._last or ([0] * len(counts), [0] * len(lateness))
        self._last = counts, lateness
        slot = now_s % self.points_max
        if self._stamp[slot] != now_s:
            self._clear(slot, now_s)
        for name, now, before in zip(COUNTS, counts, last[0]):
            self._counts[name][slot] += max(0, now - before)
        base = slot * _BUCKETS
        for i, (now, before) in enumerate(zip(lateness, last[1])):
            if now > before:
                self._lateness[base + i] += now - before
                self._claimed[slot] += now - before
        if queue_depth is not None:
            self._depth[slot] = queue_depth

    def _clear(self, slot: int, now_s: int) -> None:
        self._stamp[slot] = now_s
        for column in self._counts.values():
            column[slot] = 0
        self._depth[slot] = NOT_SAMPLED
        self._claimed[slot] = 0
        base = slot * _BUCKETS
        self._lateness[base:base + _BUCKETS] = array("q", [0]) * _BUCKETS

    def read(self, now_s: int, step_s: int = 1) -> dict[str, Any]:
        """The points of the last `points_max` seconds up to `now_s`, per `step_s` (aligned
        to it), from the first one sampled. Seconds the sampler missed count nothing."""
        n = self.points_max
        lo = now_s - n + 1
        out: dict[str, Any] = {"step_s": step_s, "points_max": n // step_s, "start": None}
        sampled = [t for t in self._stamp if lo <= t <= now_s]
        first = (max(min(sampled) // step_s * step_s, -(-lo // step_s) * step_s)
                 if sampled else now_s + 1)
        if sampled:
            out["start"] = first
        stamp = self._stamp
        slots = [t % n if stamp[t % n] == t else None for t in range(first, now_s + 1)]
        starts = range(0, len(slots), step_s)
        for name in COUNTS:
            column = self._counts[name]
            per_s = [0 if s is None else column[s] for s in slots]
            out[name] = per_s if step_s == 1 else [sum(per_s[i:i + step_s]) for i in starts]
        depth = self._depth
        per_s = [None if s is None or depth[s] == NOT_SAMPLED else depth[s] for s in slots]
        out["queue_depth"] = per_s if step_s == 1 else [
            next((d for d in reversed(per_s[i:i + step_s]) if d is not None), None)
            for i in starts]
        claimed = self._claimed
        p50, p99 = out["lateness_p50_ms"], out["lateness_p99_ms"] = [], []
        for i in starts:
            busy = [s for s in slots[i:i + step_s] if s is not None and claimed[s]]
            lateness = self._lateness_of(busy) if busy else None
            p50.append(quantile_ms(lateness, 0.5) if lateness else None)
            p99.append(quantile_ms(lateness, 0.99) if lateness else None)
        return out

    def _lateness_of(self, slots: list[int]) -> list[int]:
        """The lateness bucket counts of some slots, added up."""
        total = [0] * _BUCKETS
        for s in slots:
            chunk = self._lateness[s * _BUCKETS:(s + 1) * _BUCKETS]
            total = [a + b for a, b in zip(total, chunk)]
        return total


def quantile_ms(buckets: list[int], q: float) -> float | None:
    """The q-quantile of per-bucket counts (not cumulative) of the lateness histogram,
    interpolated linearly within its bucket; None without observations. Past the last
    bound it reads as the last bound."""
    total = sum(buckets)
    if total == 0:
        return None
    rank, seen, lower = q * total, 0, 0.0
    for bound, n in zip(LATENESS_BUCKETS_S, buckets):
        if n and seen + n >= rank:
            return round((lower + (bound - lower) * (rank - seen) / n) * 1000, 3)
        seen += n
        lower = bound
    return round(LATENESS_BUCKETS_S[-1] * 1000, 3)


async def run_sampler(series: TimeSeries, depth: Callable[[], int | None],
                      clock_s: Callable[[], float] = time.time) -> None:
    """Sample at each whole second until cancelled."""
    while True:
        now = clock_s()
        await asyncio.sleep(1 - now % 1 + SAMPLE_DELAY_S)
        series.sample(int(clock_s()), depth())
