"""What the lateness histogram's `tier` label costs (DESIGN 14.4, 14.5), in one process:

- per claimed task, the claim listener's lookup of the task's tier histogram (effective
  priority -> histogram) and its observation, against an observation of one unlabelled
  histogram (`timeit`, the minimum of 15 runs of 200,000);
- `TimeSeries.read` of a full hour of one-second points with a claim in every point (the
  minimum of 20 reads, per second and per minute), and the JSON size of the per-second
  answer with and without `lateness_p99_ms_by_tier`.

Prints (asserts nothing):

    .venv/bin/python -m bench.tier_metrics_cost
"""
from __future__ import annotations

import time
import timeit

import orjson

from tsched.node.ops.counters import BucketHistogram, TierHistograms
from tsched.node.ops.metrics import LATENESS_BUCKETS_S, NodeMetrics
from tsched.node.ops.timeseries import TimeSeries

T = 1_800_000_000 // 60 * 60      # an epoch second at a whole minute

PLAIN = "h.observe(max(0, now - run_at) / 1000)"
TIERED = ("wait = now - run_at\n"
          "eff = prio - wait // aging if wait > 0 else prio\n"
          "of[eff if eff > 0 else 0].observe(max(0, now - run_at) / 1000)")


def observe_ns() -> tuple[float, float]:
    g = {"h": BucketHistogram("x", "x", LATENESS_BUCKETS_S),
         "of": TierHistograms("x", "x", LATENESS_BUCKETS_S).of_priority,
         "now": 1_000_000, "run_at": 400_000, "prio": 8, "aging": 600_000}
    n = 200_000
    plain = min(timeit.repeat(PLAIN, globals=g, number=n, repeat=15)) / n * 1e9
    tiered = min(timeit.repeat(TIERED, globals=g, number=n, repeat=15)) / n * 1e9
    return plain, tiered


def read_hour() -> tuple[float, float, int, int]:
    m = NodeMetrics()
    ts = TimeSeries(m)
    for t in range(T, T + 3600):
        m.events.submitted += 1
        m.lateness.observe(0.01, t % 11)
        ts.sample(t, 5)
    ts.read(T + 3599)                 # the first read computes the quantiles
    best = {}
    for step in (1, 60):
        runs = []
        for _ in range(20):
            started = time.perf_counter()
            ts.read(T + 3599, step)
            runs.append(time.perf_counter() - started)
        best[step] = min(runs) * 1000
    answer = ts.read(T + 3599, 1)
    full = len(orjson.dumps(answer))
    answer.pop("lateness_p99_ms_by_tier")
    return best[1], best[60], full, len(orjson.dumps(answer))


def main() -> None:
    plain, tiered = observe_ns()
    print(f"observe per claimed task: {plain:.0f} ns unlabelled, {tiered:.0f} ns by tier "
          f"(+{tiered - plain:.0f} ns)")
    per_s, per_min, full, without = read_hour()
    print(f"read of a full hour: {per_s:.2f} ms per second, {per_min:.3f} ms per minute; "
          f"JSON {full / 1024:.0f} KiB ({without / 1024:.0f} KiB without the tier columns)")


if __name__ == "__main__":
    main()
