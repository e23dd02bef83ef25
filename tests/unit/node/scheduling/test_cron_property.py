"""Property: cron.fires() agrees with an independent oracle over the local time's fields.

The oracle walks every minute of a window as instants, reads the local wall-clock fields in
the zone, and applies DESIGN.md's DST rules directly: a matching wall time that is skipped
by a spring-forward jump fires at the jump; a fixed-hour expression fires only on the first
pass through a repeated hour. It shares no code with cron.py or croniter.
"""
from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tsched.node.scheduling import cron

UTC = dt.timezone.utc
ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata"]
# Instants near DST transitions of the zones above (and ordinary days), epoch seconds.
ANCHORS = [int(dt.datetime(*a, tzinfo=UTC).timestamp()) for a in [
    (2026, 3, 8, 7), (2026, 11, 1, 6), (2026, 3, 29, 1), (2026, 10, 25, 1),
    (2026, 4, 4, 15), (2026, 10, 3, 16), (2026, 6, 15, 12), (2028, 2, 28, 12)]]
WINDOW_S = 86_400
FIELD_RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]  # minute hour dom month dow


@st.composite
def field(draw, lo: int, hi: int) -> str:
    kind = draw(st.sampled_from(["star", "step", "value", "range", "range_step", "list"]))
    a = draw(st.integers(lo, hi))
    b = draw(st.integers(a, hi))
    n = draw(st.integers(1, max(1, (hi - lo) // 2)))
    return {
        "star": "*", "step": f"*/{n}", "value": str(a), "range": f"{a}-{b}",
        "range_step": f"{a}-{b}/{n}", "list": f"{a},{b}",
    }[kind]


expressions = st.tuples(*(field(lo, hi) for lo, hi in FIELD_RANGES)).map(" ".join)


def allowed(text: str, lo: int, hi: int) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        rng, _, step = part.partition("/")
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            a, b = (int(x) for x in rng.split("-"))
        else:
            a = b = int(rng)
        if step and rng != "*" and "-" not in rng:
            b = hi
        out.update(range(a, b + 1, int(step) if step else 1))
    return out


class Oracle:
    def __init__(self, expr: str):
        parts = expr.split()
        self.sets = [allowed(p, lo, hi) for p, (lo, hi) in zip(parts, FIELD_RANGES)]
        # Vixie cron: day of month and day of week are OR-ed when both are restricted.
        self.day_or = not parts[2].startswith("*") and not parts[4].startswith("*")
        self.fixed_hour = "*" not in parts[1] and "/" not in parts[1]

    def matches(self, wall: dt.datetime) -> bool:
        minute, hour, dom, month, dow = self.sets
        if wall.minute not in minute or wall.hour not in hour or wall.month not in month:
            return False
        in_dom = wall.day in dom
        in_dow = (wall.weekday() + 1) % 7 in dow
        return (in_dom or in_dow) if self.day_or else (in_dom and in_dow)


def expected(oracle: Oracle, zone: ZoneInfo, start_s: int, end_s: int) -> list[int]:
    fires: set[int] = set()
    first = start_s - start_s % 60 + 60
    for t in range(first, end_s + 1, 60):
        wall = dt.datetime.fromtimestamp(t, zone)
        before = dt.datetime.fromtimestamp(t - 60, zone)
        jump_s = int((wall.utcoffset() - before.utcoffset()).total_seconds())
        if jump_s > 0:  # spring forward at t: the skipped wall minutes fire now
            naive = wall.replace(tzinfo=None)
            skipped = (naive - dt.timedelta(seconds=jump_s - 60 * k) for k in range(jump_s // 60))
            if any(oracle.matches(w) for w in skipped):
                fires.add(t)
        if oracle.matches(wall) and not (oracle.fixed_hour and repeat_pass(wall, zone, t)):
            fires.add(t)
    return sorted(fires)


def repeat_pass(wall: dt.datetime, zone: ZoneInfo, t: int) -> bool:
    """Whether this wall time was already shown by the clock earlier (fall back)."""
    naive = wall.replace(tzinfo=None)
    return any(
        dt.datetime.fromtimestamp(t - back, zone).replace(tzinfo=None) == naive
        for back in range(1800, 3 * 3600 + 1, 1800))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=expressions, zone=st.sampled_from(ZONES), anchor=st.sampled_from(ANCHORS),
       shift_s=st.integers(-43_200, 43_200))
def test_fires_match_an_independent_oracle(expr, zone, anchor, shift_s):
    try:
        spec = cron.parse(expr, zone)
    except cron.CronError:
        assume(False)
    start_s = anchor - 43_200 + shift_s
    end_s = start_s + WINDOW_S
    got_ms = cron.fires(spec, start_s * 1000, 1500)
    assert all(a < b for a, b in zip(got_ms, got_ms[1:])), "fire times strictly increase"
    assert all(f > start_s * 1000 and f % 1000 == 0 for f in got_ms)
    got = [f // 1000 for f in got_ms if f // 1000 <= end_s]
    assert got == expected(Oracle(expr), spec.zone, start_s, end_s)


cron_like = st.lists(
    st.text(alphabet="0123456789*/-,LW#H?JANFEBMONSUN@ ", min_size=1, max_size=8),
    min_size=1, max_size=7).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(expr=st.one_of(cron_like, st.text(max_size=40)))
def test_any_input_parses_or_raises_cron_error(expr):
    """Bad input must become a 400, never a crash: only CronError may escape."""
    try:
        spec = cron.parse(expr, "UTC", "id")
    except cron.CronError:
        return
    got = cron.fires(spec, 1_800_000_000_000, 2)
    assert all(a < b for a, b in zip(got, got[1:]))
