"""The dashboard's time series (DESIGN 14.5): a bounded ring of one-second points sampled
from the metrics' counters, read per second or per minute."""
from __future__ import annotations

import pytest

from tsched.node.ops.metrics import NodeMetrics
from tsched.node.shards.merge import sum_timeseries
from tsched.node.ops.timeseries import TimeSeries, quantile_ms

T = 1_800_000_000 // 60 * 60      # an epoch second at a whole minute


@pytest.fixture
def m() -> NodeMetrics:
    return NodeMetrics()


def test_each_point_holds_what_happened_since_the_previous_sample(m):
    ts = TimeSeries(m)
    m.events.submitted = 10               # counted since start: in the first point
    ts.sample(T, queue_depth=10)
    m.events.submitted += 3
    m.events.dead += 1
    for s in (0.002, 0.004, 0.004, 0.2):
        m.lateness.observe(s, 0)
    ts.sample(T + 1, queue_depth=12)
    m.events.completed += 2
    ts.sample(T + 3, queue_depth=9)       # the sampler missed T + 2
    out = ts.read(T + 3)
    assert out["start"] == T and out["step_s"] == 1 and out["points_max"] == 3600
    assert out["submitted"] == [10, 3, 0, 0]
    assert out["completed"] == [0, 0, 0, 2]
    assert out["dead_lettered"] == [0, 1, 0, 0]
    assert out["queue_depth"] == [10, 12, None, 9]
    assert out["lateness_p50_ms"][0] is None and out["lateness_p50_ms"][1] == pytest.approx(3.75)
    # as histogram_quantile: p50 halfway into 2.5-5 ms, p99 at 96% of the 100-250 ms bucket
    assert out["lateness_p99_ms"][1] == pytest.approx(244.0)


def test_per_minute_points_sum_the_seconds_and_keep_the_last_depth(m):
    ts = TimeSeries(m)
    ts.sample(T, 0)
    for t in range(T + 1, T + 121):
        m.events.failed += 1
        m.lateness.observe(0.01, 5)
        ts.sample(t, t - T)
    out = ts.read(T + 120, step_s=60)
    assert out["start"] == T and out["points_max"] == 60
    assert out["failed"] == [59, 60, 1]
    assert out["queue_depth"] == [59, 119, 120]
    assert out["lateness_p99_ms"][0] == pytest.approx(9.95)


def test_the_ring_keeps_one_hour_at_most(m):
    ts = TimeSeries(m, points_max=10)
    for t in range(T, T + 25):
        m.events.submitted += 1
        ts.sample(t, 1)
    out = ts.read(T + 24)
    assert out["start"] == T + 15 and len(out["submitted"]) == 10
    assert ts.read(T + 100)["start"] is None        # all older than the window


def test_quantiles_interpolate_within_a_bucket():
    buckets = [0] * 20
    assert quantile_ms(buckets, 0.5) is None
    buckets[0] = 4                                  # four in 0..1 ms
    assert quantile_ms(buckets, 0.5) == pytest.approx(0.5)
    buckets[-1] = 100                               # past the last bound reads as it
    assert quantile_ms(buckets, 0.99) == pytest.approx(7_200_000)


def test_shards_points_add_up_aligned_by_time():
    one = {"step_s": 60, "points_max": 60, "start": T, "submitted": [1, 2],
           "queue_depth": [5, None], "lateness_p99_ms": [3.0, None]}
    two = {"step_s": 60, "points_max": 60, "start": T + 60, "submitted": [10, 20],
           "queue_depth": [7, 8], "lateness_p99_ms": [1.0, 9.0]}
    idle = {"step_s": 60, "points_max": 60, "start": None, "submitted": [],
            "queue_depth": [], "lateness_p99_ms": []}
    out = sum_timeseries([one, two, idle])
    assert out["start"] == T
    assert out["submitted"] == [1, 12, 20]
    assert out["queue_depth"] == [5, 7, 8]
    assert out["lateness_p99_ms"] == [3.0, 1.0, 9.0]     # the higher where both have one


def test_each_tier_has_its_own_p99_per_point(m):
    ts = TimeSeries(m)
    ts.sample(T, 0)
    for s in (0.002, 0.004, 0.004, 0.2):
        m.lateness.observe(s, 0)              # critical
    m.lateness.observe(2.0, 8)                # low
    ts.sample(T + 1, 0)
    ts.sample(T + 2, 0)
    m.lateness.observe(0.01, 5)               # normal, in the point of T + 3
    ts.sample(T + 3, 0)
    out = ts.read(T + 3)
    by_tier = out["lateness_p99_ms_by_tier"]
    assert list(by_tier) == ["critical", "high", "normal", "low", "batch"]
    assert by_tier["critical"] == [None, pytest.approx(244.0), None, None]
    assert by_tier["low"] == [None, pytest.approx(2485.0), None, None]   # in 1-2.5 s
    assert by_tier["normal"] == [None, None, None, pytest.approx(9.95)]
    assert by_tier["high"] == by_tier["batch"] == [None] * 4
    # the overall p99 is over every tier's claims
    assert out["lateness_p99_ms"][1] == pytest.approx(2425.0)


def test_a_point_read_while_it_fills_counts_all_its_claims_at_the_end(m):
    ts = TimeSeries(m, points_max=120)
    ts.sample(T, 0)
    m.lateness.observe(0.004, 2)
    ts.sample(T + 1, 0)
    assert ts.read(T + 1)["lateness_p99_ms_by_tier"]["high"][1] == pytest.approx(4.975)
    assert ts.read(T + 1, 60)["lateness_p99_ms_by_tier"]["high"] == [pytest.approx(4.975)]
    for _ in range(99):
        m.lateness.observe(0.2, 2)
    ts.sample(T + 59, 0)                      # same minute, another second
    assert ts.read(T + 59, 60)["lateness_p99_ms_by_tier"]["high"] == [pytest.approx(248.485)]
    ts.sample(T + 60, 0)                      # the next minute starts empty
    per_minute = ts.read(T + 60, 60)["lateness_p99_ms_by_tier"]["high"]
    assert per_minute == [pytest.approx(248.485), None]


def test_tier_points_stay_right_when_the_ring_wraps(m):
    ts = TimeSeries(m, points_max=10)         # one per-minute slot, ten per-second ones
    for t in range(T, T + 130):
        if t % 60 == 0:
            m.lateness.observe(0.02 if t < T + 120 else 0.0001, 0)
        ts.sample(t, 0)
    assert ts.read(T + 129, 60)["lateness_p99_ms_by_tier"]["critical"] == \
        [pytest.approx(0.99)]
    per_second = ts.read(T + 129)["lateness_p99_ms_by_tier"]["critical"]
    assert per_second == [pytest.approx(0.99)] + [None] * 9     # T + 120 .. T + 129


def test_shards_tier_points_take_the_highest():
    one = {"step_s": 60, "points_max": 60, "start": T, "lateness_p99_ms": [3.0, None],
           "lateness_p99_ms_by_tier": {"critical": [3.0, None], "low": [None, None]}}
    two = {"step_s": 60, "points_max": 60, "start": T + 60, "lateness_p99_ms": [1.0, 9.0],
           "lateness_p99_ms_by_tier": {"critical": [1.0, None], "low": [None, 9.0]}}
    out = sum_timeseries([one, two])
    assert out["lateness_p99_ms_by_tier"] == {"critical": [3.0, 1.0, None],
                                              "low": [None, None, 9.0]}
