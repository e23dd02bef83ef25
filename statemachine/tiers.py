"""Priority tiers (DESIGN.md section 5.1): names for ranges of effective priority, each with
its start SLA.

A tier is an inclusive range of effective priorities (0 most urgent .. 10). The tiers of a
cluster cover 0..10 without gaps or overlaps, in order, so every task has exactly one tier,
the one of its *effective* priority (aging included: a task that waits long enough moves
up into the next tier). Tiers are names over ranges, nothing more: the state machine keeps
no tier state, and a claim that names tiers is turned into ranges before it is proposed.

The cluster's tiers come from `[[priority.tiers]]` in cluster.toml (`parse_tiers`), the
default being the design's five. Workers name tiers of the default table unless they are
told the cluster's (`tsworker --priorities critical,high` means 0-3). This module imports
nothing of tsched, so node/, client/ and statemachine/ all use it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

PRIORITY_MIN = 0
PRIORITY_MAX = 10
TIERS_MAX = PRIORITY_MAX - PRIORITY_MIN + 1     # one tier per priority at most
TIER_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}\Z")
SLA_S_MAX = 7 * 86_400                          # a week: anything longer is "best effort"


@dataclass(frozen=True, slots=True)
class Tier:
    name: str
    lo: int                   # inclusive effective priority bounds
    hi: int
    sla_s: float | None       # start lateness bound; None: best effort

    def holds(self, priority: int) -> bool:
        return self.lo <= priority <= self.hi


DEFAULT_TIERS: tuple[Tier, ...] = (
    Tier("critical", 0, 0, 1.0),
    Tier("high", 1, 3, 5.0),
    Tier("normal", 4, 6, 60.0),
    Tier("low", 7, 9, 3600.0),
    Tier("batch", 10, 10, None),
)


class TierError(ValueError):
    """A tier table or a tier name is unusable; the message says which and why."""


def tier_of(priority: int, tiers: tuple[Tier, ...] = DEFAULT_TIERS) -> Tier:
    """The tier holding `priority` (clamped to 0..10: effective priorities never leave it)."""
    p = min(max(priority, PRIORITY_MIN), PRIORITY_MAX)
    for tier in tiers:
        if tier.holds(p):
            return tier
    raise AssertionError(f"tiers do not cover priority {p}: {tiers}")   # parse_tiers checks


def by_name(name: str, tiers: tuple[Tier, ...] = DEFAULT_TIERS) -> Tier:
    for tier in tiers:
        if tier.name == name:
            return tier
    raise TierError(f"unknown tier {name!r} (known: {', '.join(t.name for t in tiers)})")


def parse_tiers(raw: Any) -> tuple[Tier, ...]:
    """`[[priority.tiers]]` entries (`name`, `min`, `max`, optional `sla_s`) -> tiers.
    They must be listed in order and cover 0..10 exactly once."""
    if raw is None:
        return DEFAULT_TIERS
    if not isinstance(raw, list) or not 1 <= len(raw) <= TIERS_MAX:
        raise TierError(f"[[priority.tiers]] must list 1 to {TIERS_MAX} tiers")
    tiers = tuple(_tier(i, entry) for i, entry in enumerate(raw))
    _check_cover(tiers)
    return tiers


def _tier(i: int, entry: Any) -> Tier:
    where = f"[[priority.tiers]] #{i + 1}"
    if not isinstance(entry, dict) or set(entry) - {"name", "min", "max", "sla_s"}:
        raise TierError(f"{where}: keys are name, min, max and sla_s")
    name, lo, hi, sla = entry.get("name"), entry.get("min"), entry.get("max"), entry.get("sla_s")
    if not isinstance(name, str) or not TIER_NAME.match(name):
        raise TierError(f"{where}: name must match {TIER_NAME.pattern[:-2]}, got {name!r}")
    if type(lo) is not int or type(hi) is not int \
            or not PRIORITY_MIN <= lo <= hi <= PRIORITY_MAX:
        raise TierError(f"{where} ({name}): min and max must be integers, "
                        f"{PRIORITY_MIN} <= min <= max <= {PRIORITY_MAX}")
    if sla is not None and (isinstance(sla, bool) or not isinstance(sla, (int, float))
                            or not 0 < sla <= SLA_S_MAX):
        raise TierError(f"{where} ({name}): sla_s must be a number of seconds in "
                        f"(0, {SLA_S_MAX}] (leave it out for best effort)")
    return Tier(name, lo, hi, None if sla is None else float(sla))


def _check_cover(tiers: tuple[Tier, ...]) -> None:
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        raise TierError(f"[[priority.tiers]]: names must differ, got {names}")
    expected = PRIORITY_MIN
    for t in tiers:
        if t.lo != expected:
            raise TierError(f"[[priority.tiers]]: tier {t.name!r} starts at {t.lo}, expected "
                            f"{expected} (tiers are listed in order and leave no gap)")
        expected = t.hi + 1
    if expected != PRIORITY_MAX + 1:
        raise TierError(f"[[priority.tiers]]: the last tier must end at {PRIORITY_MAX}")


def parse_range(spec: str, tiers: tuple[Tier, ...] = DEFAULT_TIERS) -> tuple[int, int]:
    """`"0-3"`, `"5"`, `"critical"` or `"critical,high"` (adjacent tiers) -> (lo, hi)."""
    text = spec.strip()
    if text[:1].isdigit():
        lo_text, dash, hi_text = text.partition("-")
        try:
            lo, hi = int(lo_text), int(hi_text if dash else lo_text)
        except ValueError:
            raise TierError(f"priorities must be LO-HI (0..10) or tier names, got {spec!r}") \
                from None
        if not PRIORITY_MIN <= lo <= hi <= PRIORITY_MAX:
            raise TierError(f"priorities must have 0 <= LO <= HI <= 10, got {spec!r}")
        return lo, hi
    chosen = sorted((by_name(n.strip(), tiers) for n in text.split(",")), key=lambda t: t.lo)
    for a, b in zip(chosen, chosen[1:]):
        if b.lo != a.hi + 1:
            raise TierError(f"tiers {a.name!r} and {b.name!r} are not adjacent: a range "
                            f"is one interval of priorities")
    return chosen[0].lo, chosen[-1].hi


def to_json(tiers: Iterable[Tier]) -> list[dict]:
    """Tiers as the API shows them (GET /v1/cluster `tiers`)."""
    return [{"name": t.name, "priority_min": t.lo, "priority_max": t.hi, "sla_s": t.sla_s}
            for t in tiers]
