"""Order statistics for benchmark samples (no numpy: the bench runs on the base install)."""
from __future__ import annotations

import math
from typing import Iterable, Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not samples:
        return math.nan
    data = sorted(samples)
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def median(samples: Sequence[float]) -> float:
    return percentile(samples, 50)


def summary(samples: Iterable[float], qs: Sequence[float] = (50, 95, 99)) -> dict[str, float]:
    """{"n", "p50", "p95", "p99", "max"} (NaN when there are no samples)."""
    data = sorted(samples)
    out: dict[str, float] = {"n": len(data)}
    for q in qs:
        out[f"p{q:g}"] = percentile(data, q)
    out["max"] = data[-1] if data else math.nan
    return out
