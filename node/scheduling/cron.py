"""Cron fire times in a schedule's IANA zone (pure functions, no global state).

croniter only enumerates *wall-clock* matches: we run it over naive local datetimes and map
each match to instants ourselves, so the DST rules of DESIGN.md section 5 do not depend on
croniter's own time-zone handling:

- a local time that does not exist (spring forward) fires at the transition instant;
- a local time that occurs twice (fall back) fires once, at its first occurrence, when the
  hour field is fixed; when the hour field is a wildcard or a step the expression follows
  elapsed time and fires in both occurrences.

Expressions: 5 fields, or 6 with a leading seconds field; macros (@hourly, @daily,
@midnight, @weekly, @monthly, @yearly, @annually); `L`, `W`, `#`; `H` hashed by the
schedule id so that many schedules written `H * * * *` spread over the hour.
"""
from __future__ import annotations

import copy
import datetime as dt
import re
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter import CroniterError

from tsched.statemachine.limits import LIMITS

EXPR_CHARS_MAX = LIMITS.cron_chars_max     # statemachine/limits.py: the one source
ZONE_CHARS_MAX = LIMITS.timezone_chars_max
HASH_ID_CHARS_MAX = 256
# Without a year field every expression repeats within the 400-year Gregorian cycle, and in
# practice within 28 years (Feb 29 on a given weekday); 2096 -> 2104 is the longest leap gap.
HORIZON_YEARS = 30
FIRES_COUNT_MAX = 10_000

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

# The fields in order and the values each takes, to name the field a mistake is in. The
# same small table as client/cron_check.py (the client's check before a request), kept
# twice on purpose: node/ never imports tsched.client, and the client cannot import the node;
# statemachine/ (below both) holds replicated rules, not cron syntax.
FIELDS = ("minute", "hour", "day of month", "month", "day of week")
ACCEPTED = {"second": "0-59", "minute": "0-59", "hour": "0-23",
            "day of month": "1-31, L, or a weekday such as 15W", "month": "1-12 or JAN-DEC",
            "day of week": "0-7 or SUN-SAT (0 and 7: Sunday), or the nth weekday 5#3"}

_EQUAL_RANGE = re.compile(r"^(\d+)-(\d+)(?:/\d+)?$")
_EPOCH = dt.datetime(1970, 1, 1)
_OFFSET_PROBE_S_MAX = 253_402_214_400  # 9999-12-31T00:00:00Z: local times still representable
_UTC = dt.timezone.utc
# Look this far ahead for a fall-back transition whose repeated hour could precede a match.
_FOLD_LOOKAHEAD_S = 6 * 3600
# A reference instant for the never-fires check (parse is pure: it may not read a clock).
_REFERENCE_MS = 946_684_800_000  # 2000-01-01T00:00:00Z


class CronError(ValueError):
    """An expression that is malformed, never fires, or names an unknown zone."""


@dataclass(frozen=True, slots=True)
class CronSpec:
    expr: str            # as given (stripped)
    fields: str          # the croniter expression (macros expanded)
    has_seconds: bool    # 6 fields, seconds first
    fixed_hour: bool     # hour field is neither a wildcard nor a step: fall-back fires once
    timezone: str
    zone: ZoneInfo
    hash_id: str
    # Parsed once; each search runs on a shallow copy (croniter's parse is the costly part).
    proto: croniter | None = field(default=None, compare=False, repr=False)


def parse(expr: str, timezone: str = "UTC", hash_id: str = "") -> CronSpec:
    if not isinstance(expr, str) or not expr.strip():
        raise CronError("cron expression is empty")
    if len(expr) > EXPR_CHARS_MAX:
        raise CronError(f"cron expression is longer than {EXPR_CHARS_MAX} characters")
    if len(hash_id) > HASH_ID_CHARS_MAX:
        raise CronError(f"hash id is longer than {HASH_ID_CHARS_MAX} characters")
    zone = load_zone(timezone)
    text = " ".join(expr.split())
    fields = MACROS.get(text.lower(), text)
    if fields.startswith("@"):
        raise CronError(f"unknown cron macro {text!r} (known: {', '.join(MACROS)})")
    parts = fields.split(" ")
    if len(parts) not in (5, 6):
        raise CronError(f"cron expression needs 5 fields (or 6 with seconds first), got {len(parts)}")
    has_seconds = len(parts) == 6
    fields = " ".join(_single_value_ranges(part) for part in parts)
    hour = parts[2 if has_seconds else 1]
    day_of_month, day_of_week = parts[-3], parts[-1]
    # Vixie cron: the day fields are OR-ed only when neither starts with `*` (croniter alone
    # treats `*/1` as a restriction and ORs it).
    day_or = not (day_of_month.startswith("*") or day_of_week.startswith("*"))
    try:
        proto = croniter(fields, _EPOCH, hash_id=hash_id.encode(), day_or=day_or,
                         second_at_beginning=has_seconds)
    except (CroniterError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise CronError(f"invalid cron expression {text!r}: "
                        f"{_bad_field(fields.split(' '), hash_id) or exc}") from None
    spec = CronSpec(expr=text, fields=fields, has_seconds=has_seconds,
                    fixed_hour=("*" not in hour and "/" not in hour),
                    timezone=timezone, zone=zone, hash_id=hash_id, proto=proto)
    if next_fire_ms(spec, _REFERENCE_MS) is None:
        raise CronError(f"cron expression {text!r} never fires")
    return spec


def _bad_field(parts: list[str], hash_id: str) -> str | None:
    """The first field croniter refuses on its own (the others `*`), named with the values
    it takes; None when each field alone is accepted (their combination is not)."""
    names = (("second",) if len(parts) == 6 else ()) + FIELDS
    for i, (name, part) in enumerate(zip(names, parts)):
        alone = " ".join(["*"] * i + [part] + ["*"] * (len(parts) - i - 1))
        try:
            croniter(alone, _EPOCH, hash_id=hash_id.encode(), second_at_beginning=len(parts) == 6)
        except (CroniterError, ValueError, KeyError, IndexError, TypeError):
            return (f"the {name} field {part!r} is not valid (the {name} takes "
                    f"{ACCEPTED[name]}, lists a,b, ranges a-b and steps */n)")
    return None


def _single_value_ranges(part: str) -> str:
    """`a-a` (and `a-a/n`) -> `a`: croniter reads a range with equal ends as the whole range."""
    out = []
    for item in part.split(","):
        m = _EQUAL_RANGE.match(item)
        out.append(m.group(1) if m and int(m.group(1)) == int(m.group(2)) else item)
    return ",".join(out)


def load_zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name or len(name) > ZONE_CHARS_MAX:
        raise CronError(f"unknown time zone {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"unknown time zone {name!r}") from None


def next_fire_ms(spec: CronSpec, after_ms: int) -> int | None:
    """The first fire instant strictly after `after_ms`, or None within the horizon."""
    found = fires(spec, after_ms, 1)
    return found[0] if found else None


def fires(spec: CronSpec, from_ms: int, count: int) -> list[int]:
    """Up to `count` fire instants strictly after `from_ms`, increasing (epoch ms)."""
    count = max(0, min(count, FIRES_COUNT_MAX))
    out: list[int] = []
    after_s = from_ms // 1000  # fires are whole seconds: strictly after ms <=> after its second
    while len(out) < count:
        nxt = _next_s(spec, after_s)
        if nxt is None:
            break
        out.append(nxt * 1000)
        after_s = nxt
    return out


# --- mapping wall-clock matches to instants ---------------------------------------------------

def _next_s(spec: CronSpec, after_s: int) -> int | None:
    """The first fire instant (epoch s) strictly after `after_s`."""
    try:
        return _search(spec, after_s)
    except (OverflowError, ValueError):  # walked past year 9999: no representable fire
        return None


def _search(spec: CronSpec, after_s: int) -> int | None:
    zone = spec.zone
    start = _wall(zone, after_s)
    fold_start = _upcoming_fold_wall_start(zone, after_s)
    if fold_start is not None and fold_start <= start:
        # Matches in the repeated hour ahead have wall times before ours.
        start = fold_start - dt.timedelta(seconds=1)
    max_off_s = max(_offset_s(zone, after_s), _offset_s(zone, after_s + _FOLD_LOOKAHEAD_S))
    horizon = dt.timedelta(days=366 * HORIZON_YEARS)
    limit = start + horizon if start < dt.datetime.max - horizon else dt.datetime.max
    try:
        it = _iterator(spec, start)
        best: int | None = None
        while True:
            wall = it.get_next(dt.datetime)
            if wall > limit:
                return best
            earliest_s = _naive_s(wall) - max_off_s  # no instant of a later wall time precedes it
            if best is not None and earliest_s >= best:
                return best
            for inst in _instants(spec, wall):
                if inst > after_s and (best is None or inst < best):
                    best = inst
            if best is not None and best <= earliest_s:
                return best
    except CroniterError:  # croniter gave up looking: no match within its own horizon
        return None


def _instants(spec: CronSpec, wall: dt.datetime) -> list[int]:
    zone = spec.zone
    first = _to_s(wall.replace(tzinfo=zone, fold=0))
    second = _to_s(wall.replace(tzinfo=zone, fold=1))
    if first == second:
        return [first]
    if _wall(zone, first) != wall:  # does not exist: fire when the clock jumps over it
        return [_transition_s(zone, min(first, second), max(first, second))]
    if spec.fixed_hour:
        return [min(first, second)]
    return sorted((first, second))


def _transition_s(zone: ZoneInfo, lo: int, hi: int) -> int:
    """The first second in (lo, hi] whose offset differs from lo's."""
    before = _offset_s(zone, lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_s(zone, mid) == before:
            lo = mid
        else:
            hi = mid
    return hi


def _upcoming_fold_wall_start(zone: ZoneInfo, after_s: int) -> dt.datetime | None:
    """The wall time at which an offset decrease within the look-ahead begins repeating."""
    now_off = _offset_s(zone, after_s)
    later_off = _offset_s(zone, after_s + _FOLD_LOOKAHEAD_S)
    if later_off >= now_off:
        return None
    at = _transition_s(zone, after_s, after_s + _FOLD_LOOKAHEAD_S)
    return _wall(zone, at)


def _iterator(spec: CronSpec, start: dt.datetime) -> croniter:
    assert spec.proto is not None, "parse() always sets proto"
    it = copy.copy(spec.proto)
    it.set_current(start, force=True)
    return it


def _wall(zone: ZoneInfo, epoch_s: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch_s, zone).replace(tzinfo=None, fold=0)


def _offset_s(zone: ZoneInfo, epoch_s: int) -> int:
    epoch_s = min(epoch_s, _OFFSET_PROBE_S_MAX)  # look-ahead probes near year 9999
    offset = dt.datetime.fromtimestamp(epoch_s, zone).utcoffset()
    assert offset is not None, "an aware datetime of a ZoneInfo always has an offset"
    return int(offset.total_seconds())


def _to_s(aware: dt.datetime) -> int:
    return int(aware.timestamp())


def _naive_s(wall: dt.datetime) -> int:
    return int((wall - _EPOCH).total_seconds())


def format_local(epoch_ms: int, zone: ZoneInfo) -> str:
    """RFC 3339 in `zone`, with its offset (e.g. 2026-03-08T03:00:00-04:00)."""
    local = dt.datetime.fromtimestamp(epoch_ms / 1000, zone)
    text = local.isoformat(timespec="milliseconds" if epoch_ms % 1000 else "seconds")
    return text.replace("+00:00", "Z") if zone.key == "UTC" else text
