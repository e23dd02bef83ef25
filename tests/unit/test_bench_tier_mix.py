"""The priority benchmark's pure helpers (bench/lib/tier_mix.py): the submit mix by tier,
the split of slots into pools, each mode's ranges, and the figures per tier."""
from __future__ import annotations

import math
from collections import Counter

from bench.lib.tier_mix import (
    pool_ranges, pool_use, priority_of, split_slots, tier_figures, tiers_by_pool,
    window_p99s)


def test_the_mix_is_10_30_40_20_percent_with_each_tiers_priorities_in_turn() -> None:
    prios = Counter(priority_of(i) for i in range(1200))
    assert prios[0] == 120
    assert [prios[p] for p in (1, 2, 3)] == [120, 120, 120]
    assert [prios[p] for p in (4, 5, 6)] == [160, 160, 160]
    assert [prios[p] for p in (7, 8, 9)] == [80, 80, 80]
    assert prios[10] == 0


def test_slots_split_by_share_largest_remainder_at_least_one_each() -> None:
    assert split_slots(20) == {"critical": 4, "high": 8, "normal": 6, "low": 2}
    assert split_slots(4) == {"critical": 1, "high": 1, "normal": 1, "low": 1}
    for total in range(4, 64):
        assert sum(split_slots(total).values()) == total


def test_ranges_per_mode() -> None:
    assert pool_ranges("shared") == {"critical": "0-0", "high": "0-3", "normal": "0-6",
                                     "low": "0-9"}
    assert pool_ranges("reserved")["low"] == "7-9"
    assert pool_ranges("per-tier") == {"critical": "0-0", "high": "1-3", "normal": "4-6",
                                       "low": "7-9"}


def test_figures_per_tier() -> None:
    # i = 5 is critical (priority 0), i = 2 is low (7), i = 0 is normal (4); t0 = 0 ms.
    submitted = {5: (20_000.0, 20_010.0), 2: (15_000.0, 15_005.0), 0: (1_000.0, 1_002.0)}
    starts = {5: (0, 20_000.0, 20_300.0, "critical"), 2: (7, 15_000.0, 25_000.0, "low")}
    ends = {5: 20_350.0, 2: 25_050.0}
    f = tier_figures(submitted, starts, ends, 0.0, 40_000.0, warmup_s=10, window_s=10)
    assert f["critical"].lateness_s == [0.3]
    assert f["critical"].completed == 1 and f["critical"].window_completions == [0, 1, 0]
    assert f["low"].window_completions == [0, 1, 0]
    assert f["normal"].started == 0 and f["normal"].oldest_unstarted_wait_s == 39.0
    assert f["normal"].lateness_s == []     # due before the warm-up ended
    use = pool_use(starts, ends, {"critical": 1, "low": 2}, 10_000.0, 30_000.0)
    assert use == {"critical": 50 / 20_000, "low": 50 / 40_000}
    assert tiers_by_pool(starts, 40_000.0) == {"critical": {"critical": 1}, "low": {"low": 1}}


def test_p99_per_window_of_due_times() -> None:
    submitted = {5: (1_000.0, 1_001.0), 15: (12_000.0, 12_001.0), 0: (13_000.0, 13_001.0)}
    starts = {5: (0, 1_000.0, 1_500.0, "critical"), 15: (0, 12_000.0, 14_000.0, "critical")}
    rows = window_p99s(submitted, starts, 0.0, 20_000.0, 10)
    assert [r["critical"] for r in rows] == [0.5, 2.0]
    assert math.isnan(rows[0]["normal"]) and math.isnan(rows[1]["normal"])   # none started
