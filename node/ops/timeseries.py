"""The last hour of a node's activity, for the dashboard's graphs (DESIGN 14.5).

A ring of `POINTS_MAX` one-second points and a ring of as many minutes, fixed in size
when the node starts (arrays of numbers: about 950 KiB with five tiers, whatever the load).
Once a second a sampler takes the difference of
the metrics' cumulative counters (submitted, completed, failed attempts, dead-lettered,
the lateness histogram's buckets) and the current queue depth (pending tasks), so the
apply path does no work for the graphs at all. Reads return columns, per second or summed
per minute; lateness p50/p99 are interpolated in the histogram's buckets, as Prometheus'
`histogram_quantile` does, and so is each priority tier's p99 (the histogram's `tier`
label): only the point being filled keeps per-tier buckets, and its p99s are written when
the next point starts (or a read comes), so a point costs one number per tier.

Every replica applies the same commands, so every node of a shard draws the same counts.
"""
from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import Callable

from tsched.node.ops.metrics import LATENESS_BUCKETS_S, NodeMetrics

POINTS_MAX = 3600              # one hour of one-second points
STEPS_S = (1, 60)              # per second, or summed per minute
COUNTS = ("submitted", "completed", "failed", "dead_lettered")
_EVENT_OF = {"submitted": "submitted", "completed": "completed", "failed": "failed",
             "dead_lettered": "dead"}
_BUCKETS = len(LATENESS_BUCKETS_S) + 1        # the last one is +Inf
NOT_SAMPLED = -1
SAMPLE_DELAY_S = 0.005         # wake just after the second turns, never just before
NAN = float("nan")             # a point without a claim has no lateness


class TimeSeries:
    """Two rings fed by the same samples: `points_max` one-second points and as many
    minutes as make the same span. `sample` is called once a second by one task; `read` by
    request handlers (both on the event loop, so no lock is needed)."""

    def __init__(self, metrics: NodeMetrics, points_max: int = POINTS_MAX) -> None:
        self._m = metrics
        self.points_max = points_max
        self._tiers = list(metrics.lateness.by_tier.values())
        names = tuple(metrics.lateness.by_tier)
        self._rings = {step: _Ring(max(1, points_max // step), step, names)
                       for step in STEPS_S}
        self._last: tuple[list[int], list[int]] | None = None

    def _cumulative(self) -> tuple[list[int], list[int]]:
        """The event counts, then every tier's lateness buckets one tier after the other."""
        events = self._m.events
        return ([getattr(events, _EVENT_OF[n]) for n in COUNTS],
                [n for histogram in self._tiers for n in histogram.counts])

    def sample(self, now_s: int, queue_depth: int | None) -> None:
        """Record what happened since the previous sample in the points of second `now_s`."""
        counts, lateness = self._cumulative()
        # The first point holds what the counters counted before it, since the node started:
        # the graphs add up to the /metrics counters.
        last = self._last or ([0] * len(counts), [0] * len(lateness))
        self._last = counts, lateness
        deltas = [max(0, a - b) for a, b in zip(counts, last[0])]
        by_tier = [max(0, a - b) for a, b in zip(lateness, last[1])]
        late = [sum(by_tier[k::_BUCKETS]) for k in range(_BUCKETS)]
        for ring in self._rings.values():
            ring.add(now_s, deltas, late, queue_depth, by_tier)

    def read(self, now_s: int, step_s: int = 1) -> dict[str, object]:
        """The points of the last `points_max` seconds up to `now_s`, per `step_s` (aligned
        to it), from the first one sampled. Seconds the sampler missed count nothing."""
        out: dict[str, object] = {"step_s": step_s, "points_max": self.points_max // step_s}
        out.update(self._rings[step_s].read(now_s, self.points_max))
        return out


class _Ring:
    """Fixed arrays of `slots` points of `step_s` seconds each; a slot's lateness quantiles
    are computed once after it changed (reads then cost a pass over plain arrays)."""

    def __init__(self, slots: int, step_s: int, tiers: tuple[str, ...] = ()) -> None:
        self.slots, self.step_s, self.tiers = slots, step_s, tiers
        self.stamp = array("q", [NOT_SAMPLED]) * slots      # the first second of each point
        self.counts = {name: array("q", [0]) * slots for name in COUNTS}
        self.depth = array("q", [NOT_SAMPLED]) * slots
        self.lateness = array("q", [0]) * (slots * _BUCKETS)
        self.p50 = array("d", [NAN]) * slots
        self.p99 = array("d", [NAN]) * slots
        self.stale = array("b", [0]) * slots                # lateness changed since computed
        self.tier_p99 = array("d", [NAN]) * (slots * len(tiers))   # point i: i * tiers + t
        self.open_start = NOT_SAMPLED                       # the point being filled
        self.open_late = array("q", [0]) * (len(tiers) * _BUCKETS)
        self.open_stale = False

    def add(self, now_s: int, deltas: list[int], late: list[int], depth: int | None,
            by_tier: list[int] | None = None) -> None:
        start = now_s - now_s % self.step_s
        i = start // self.step_s % self.slots
        if start != self.open_start:
            self._settle_tiers()
            self.open_start = start
            self.open_late = array("q", [0]) * len(self.open_late)
        if self.stamp[i] != start:
            self._clear(i, start)
        if by_tier is not None and any(by_tier):
            for k, n in enumerate(by_tier):
                self.open_late[k] += n
            self.open_stale = True
        for name, n in zip(COUNTS, deltas):
            self.counts[name][i] += n
        if any(late):
            base = i * _BUCKETS
            for k, n in enumerate(late):
                self.lateness[base + k] += n
            self.stale[i] = 1
        if depth is not None:
            self.depth[i] = depth

    def _clear(self, i: int, start: int) -> None:
        self.stamp[i] = start
        for column in self.counts.values():
            column[i] = 0
        self.depth[i] = NOT_SAMPLED
        self.lateness[i * _BUCKETS:(i + 1) * _BUCKETS] = array("q", [0]) * _BUCKETS
        self.p50[i] = self.p99[i] = NAN
        self.stale[i] = 0
        n = len(self.tiers)
        self.tier_p99[i * n:(i + 1) * n] = array("d", [NAN]) * n

    def _settle_tiers(self) -> None:
        """Write the open point's per-tier p99s (from its buckets so far) into its slot."""
        start = self.open_start
        i = start // self.step_s % self.slots
        if not self.open_stale or start == NOT_SAMPLED or self.stamp[i] != start:
            return
        self.open_stale = False
        n, late = len(self.tiers), self.open_late
        for t in range(n):
            p99 = quantile_ms(list(late[t * _BUCKETS:(t + 1) * _BUCKETS]), 0.99)
            self.tier_p99[i * n + t] = _or_nan(p99)

    def read(self, now_s: int, span_s: int) -> dict[str, object]:
        step, stamp = self.step_s, self.stamp
        lo = now_s - span_s + 1
        sampled = [t for t in stamp if t != NOT_SAMPLED and lo - step < t <= now_s]
        first = max(min(sampled), -(-lo // step) * step) if sampled else now_s + 1
        out: dict[str, object] = {"start": first if sampled else None}
        slots = [t // step % self.slots if stamp[t // step % self.slots] == t else None
                 for t in range(first, now_s + 1, step)]
        for i in slots:
            if i is not None and self.stale[i]:
                buckets = list(self.lateness[i * _BUCKETS:(i + 1) * _BUCKETS])
                self.p50[i] = _or_nan(quantile_ms(buckets, 0.5))
                self.p99[i] = _or_nan(quantile_ms(buckets, 0.99))
                self.stale[i] = 0
        for name in COUNTS:
            column = self.counts[name]
            out[name] = [0 if i is None else column[i] for i in slots]
        depth = self.depth
        out["queue_depth"] = [None if i is None or depth[i] == NOT_SAMPLED else depth[i]
                              for i in slots]
        for name, quantile in (("lateness_p50_ms", self.p50), ("lateness_p99_ms", self.p99)):
            out[name] = [None if i is None or quantile[i] != quantile[i] else quantile[i]
                         for i in slots]          # NaN != NaN: no claim in that point
        self._settle_tiers()
        n, tier_p99 = len(self.tiers), self.tier_p99
        bases = [-1 if i is None else i * n for i in slots]
        out["lateness_p99_ms_by_tier"] = {
            tier: [None if b < 0 or (v := tier_p99[b + t]) != v else v for b in bases]
            for t, tier in enumerate(self.tiers)}
        return out


def _or_nan(value: float | None) -> float:
    return NAN if value is None else value


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
