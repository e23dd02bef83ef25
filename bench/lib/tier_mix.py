"""Pure helpers of the priority benchmark (bench/priority.py): the submit mix by tier, the
split of worker slots into pools, and the figures per tier from what the workers recorded.
No I/O and no clock: times come in as arguments (wall clock ms)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from tsched.statemachine.tiers import DEFAULT_TIERS, Tier

from .stats import percentile

TIERS: tuple[Tier, ...] = tuple(t for t in DEFAULT_TIERS if t.sla_s is not None)  # 0..9
# Ten submits in a row: critical 1, high 3, normal 4, low 2 (10/30/40/20 %), spread out.
MIX_PATTERN = ("normal", "high", "low", "normal", "high",
               "critical", "normal", "high", "low", "normal")
# Worker slots by pool (DESIGN 5.1's example shares); each pool is named after its tier.
POOL_SHARES = (("critical", 0.2), ("high", 0.4), ("normal", 0.3), ("low", 0.1))


def _tier(name: str) -> Tier:
    return next(t for t in TIERS if t.name == name)


def priority_of(i: int) -> int:
    """The priority of the i-th submit: its tier from MIX_PATTERN, and within the tier the
    tier's priorities in turn (high: 1, 2, 3, 1, ...)."""
    cycle, pos = divmod(i, len(MIX_PATTERN))
    name = MIX_PATTERN[pos]
    per_cycle = MIX_PATTERN.count(name)
    nth = cycle * per_cycle + MIX_PATTERN[:pos].count(name)
    tier = _tier(name)
    return tier.lo + nth % (tier.hi - tier.lo + 1)


def split_slots(total: int, shares=POOL_SHARES) -> dict[str, int]:
    """`total` slots by share, largest remainder first, at least one per pool."""
    if total < len(shares):
        raise ValueError(f"at least {len(shares)} slots (one per pool)")
    raw = {name: total * share for name, share in shares}
    out = {name: max(1, math.floor(v)) for name, v in raw.items()}
    by_remainder = sorted(raw, key=lambda n: (out[n] - raw[n], [s[0] for s in shares].index(n)))
    k = 0
    while sum(out.values()) < total:
        out[by_remainder[k % len(by_remainder)]] += 1
        k += 1
    while sum(out.values()) > total:   # the at-least-one rule took slots from others
        biggest = max(out, key=lambda n: out[n])
        out[biggest] -= 1
    return out


def range_of(tier_names: list[str]) -> str:
    lo = min(_tier(n).lo for n in tier_names)
    hi = max(_tier(n).hi for n in tier_names)
    return f"{lo}-{hi}"


def pool_ranges(mode: str) -> dict[str, str]:
    """Each pool's `priorities=` range in a mode (bench/priority.py's docstring says why):
      shared   - a pool serves its tier and every more urgent one, most urgent first; the
                 low pool serves everything (no slot is only for low);
      reserved - as shared, but the low pool's slots claim only the low range: what
                 `Worker(reserve={"low": 0.1})` does with 10 % of a worker's slots;
      per-tier - each pool its own tier only (one pool per tier, DESIGN 5.1's other shape)."""
    names = [n for n, _ in POOL_SHARES]
    if mode == "per-tier":
        return {n: range_of([n]) for n in names}
    out = {n: range_of(names[:k + 1]) for k, n in enumerate(names)}
    if mode == "reserved":
        out["low"] = range_of(["low"])
    elif mode != "shared":
        raise ValueError(f"unknown mode {mode!r}")
    return out


@dataclass
class TierFigures:
    submitted: int = 0
    started: int = 0
    completed: int = 0
    lateness_s: list[float] = field(default_factory=list)   # tasks due after the warm-up
    after_ack_s: list[float] = field(default_factory=list)  # the same tasks, start - ack
    oldest_unstarted_wait_s: float = 0.0
    window_completions: list[int] = field(default_factory=list)


def tier_figures(submitted: dict[int, tuple[float, float]], starts: dict[int, tuple[int, float, float, str]],
                 ends: dict[int, float], t0_ms: float, end_ms: float, warmup_s: float,
                 window_s: float) -> dict[str, TierFigures]:
    """Per tier, over the load [t0_ms, end_ms]: submits acknowledged (`submitted`: i ->
    (due ms, acknowledged ms)), handlers started and returned by end_ms, start lateness
    (start - due, and start - acknowledgement) of the tasks due after the warm-up, the wait
    at end_ms of the oldest acknowledged task not started, and handlers returned per
    `window_s` window after the warm-up."""
    out = {t.name: TierFigures() for t in TIERS}
    cut_ms = t0_ms + warmup_s * 1000.0
    windows = max(0, int((end_ms - cut_ms) // (window_s * 1000.0)))
    for f in out.values():
        f.window_completions = [0] * windows
    for i, (due, acked) in submitted.items():
        f = out[_tier_name(priority_of(i))]
        f.submitted += 1
        start = starts.get(i)
        if start is None or start[2] > end_ms:
            f.oldest_unstarted_wait_s = max(f.oldest_unstarted_wait_s, (end_ms - due) / 1000.0)
            continue
        f.started += 1
        if due >= cut_ms:
            f.lateness_s.append((start[2] - due) / 1000.0)
            f.after_ack_s.append((start[2] - acked) / 1000.0)
        end = ends.get(i)
        if end is not None and end <= end_ms:
            f.completed += 1
            w = int((end - cut_ms) // (window_s * 1000.0))
            if 0 <= w < windows:
                f.window_completions[w] += 1
    return out


def _tier_name(priority: int) -> str:
    return next(t.name for t in TIERS if t.holds(priority))


def pool_use(starts: dict[int, tuple[int, float, float, str]], ends: dict[int, float],
             slots: dict[str, int], from_ms: float, to_ms: float) -> dict[str, float]:
    """Per pool, the share of its slot time spent in handlers between from_ms and to_ms."""
    busy = {name: 0.0 for name in slots}
    for i, (_, _, start, pool) in starts.items():
        end = min(ends.get(i, to_ms), to_ms)
        busy[pool] += max(0.0, end - max(start, from_ms))
    span = max(to_ms - from_ms, 1e-9)
    return {name: busy[name] / (slots[name] * span) for name in slots}


def tiers_by_pool(starts: dict[int, tuple[int, float, float, str]], to_ms: float
                  ) -> dict[str, dict[str, int]]:
    """Per pool, handlers started by to_ms per tier: which pool served which work."""
    out: dict[str, dict[str, int]] = {}
    for _, (priority, _, start, pool) in starts.items():
        if start <= to_ms:
            counts = out.setdefault(pool, {})
            name = _tier_name(priority)
            counts[name] = counts.get(name, 0) + 1
    return out


def window_p99s(submitted: dict[int, tuple[float, float]],
                starts: dict[int, tuple[int, float, float, str]], t0_ms: float, end_ms: float,
                window_s: float) -> list[dict[str, float]]:
    """Per `window_s` window of due times from t0_ms, per tier, the p99 start lateness (s)
    of the tasks due in it that started by end_ms (NaN: none did): how lateness moves as
    the backlog grows."""
    span = window_s * 1000.0
    n = max(0, int((end_ms - t0_ms) // span))
    late: list[dict[str, list[float]]] = [{} for _ in range(n)]
    for i, (due, _) in submitted.items():
        w = int((due - t0_ms) // span)
        start = starts.get(i)
        if 0 <= w < n and start is not None and start[2] <= end_ms:
            late[w].setdefault(_tier_name(priority_of(i)), []).append((start[2] - due) / 1000.0)
    return [{t.name: percentile(row.get(t.name, []), 99) for t in TIERS} for row in late]
