"""cron.py: expressions, zones and the DST rules of DESIGN.md section 5."""
from __future__ import annotations

import datetime as dt

import pytest

from tsched.node.scheduling import cron


def ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text).timestamp() * 1000)


def local(expr: str, zone: str, start: str, count: int, hash_id: str = "") -> list[str]:
    spec = cron.parse(expr, zone, hash_id)
    return [cron.format_local(f, spec.zone) for f in cron.fires(spec, ms(start), count)]


# --- spring forward: a missing local time fires at the transition ----------------------------

def test_new_york_spring_forward_fixed_hour_fires_at_transition():
    # 2026-03-08 02:00 EST jumps to 03:00 EDT: 02:30 does not exist that day.
    assert local("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 3) == [
        "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"]


def test_new_york_spring_forward_wildcard_hour_follows_elapsed_time():
    assert local("*/30 * * * *", "America/New_York", "2026-03-08T05:50:00Z", 4) == [
        "2026-03-08T01:00:00-05:00", "2026-03-08T01:30:00-05:00",
        "2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"]


def test_new_york_spring_forward_step_hour_collapses_missing_matches_into_one_fire():
    # 02:00, 02:20, 02:40 all fall in the gap: one fire at the jump, then 03:00 is the same
    # instant, so it is not repeated.
    assert local("*/20 */1 * * *", "America/New_York", "2026-03-08T06:30:00Z", 4) == [
        "2026-03-08T01:40:00-05:00", "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:20:00-04:00", "2026-03-08T03:40:00-04:00"]


def test_berlin_spring_forward_fixed_and_step():
    # 2026-03-29 02:00 CET jumps to 03:00 CEST.
    assert local("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", 2) == [
        "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]
    assert local("0 */2 * * *", "Europe/Berlin", "2026-03-28T22:30:00Z", 3) == [
        "2026-03-29T00:00:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00"]
    assert local("15 * * * *", "Europe/Berlin", "2026-03-29T00:00:00Z", 3) == [
        "2026-03-29T01:15:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T03:15:00+02:00"]


# --- fall back: a repeated local time ----------------------------------------------------------

def test_new_york_fall_back_fixed_hour_fires_once_at_first_occurrence():
    # 2026-11-01 02:00 EDT falls back to 01:00 EST: 01:30 happens twice.
    assert local("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 3) == [
        "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00", "2026-11-03T01:30:00-05:00"]


def test_new_york_fall_back_fixed_hour_with_minute_step_stays_in_first_occurrence():
    assert local("*/20 1 * * *", "America/New_York", "2026-11-01T04:00:00Z", 4) == [
        "2026-11-01T01:00:00-04:00", "2026-11-01T01:20:00-04:00",
        "2026-11-01T01:40:00-04:00", "2026-11-02T01:00:00-05:00"]


def test_new_york_fall_back_wildcard_hour_fires_in_both_occurrences():
    assert local("*/20 * * * *", "America/New_York", "2026-11-01T05:10:00Z", 6) == [
        "2026-11-01T01:20:00-04:00", "2026-11-01T01:40:00-04:00",
        "2026-11-01T01:00:00-05:00", "2026-11-01T01:20:00-05:00",
        "2026-11-01T01:40:00-05:00", "2026-11-01T02:00:00-05:00"]


def test_new_york_fall_back_from_inside_the_second_occurrence():
    # Starting at 01:10 EST (the repeat): the first pass's matches are in the past.
    assert local("*/20 * * * *", "America/New_York", "2026-11-01T06:10:00Z", 2) == [
        "2026-11-01T01:20:00-05:00", "2026-11-01T01:40:00-05:00"]


def test_berlin_fall_back_fixed_step_and_wildcard():
    # 2026-10-25 03:00 CEST falls back to 02:00 CET: 02:xx happens twice.
    assert local("0 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2) == [
        "2026-10-25T02:00:00+02:00", "2026-10-26T02:00:00+01:00"]
    assert local("0 */2 * * *", "Europe/Berlin", "2026-10-24T21:00:00Z", 4) == [
        "2026-10-25T00:00:00+02:00", "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00", "2026-10-25T04:00:00+01:00"]
    assert local("30 * * * *", "Europe/Berlin", "2026-10-24T23:00:00Z", 3) == [
        "2026-10-25T01:30:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00"]


def test_fixed_hour_list_fires_once_in_a_repeated_hour():
    assert local("0 1,2 * * *", "America/New_York", "2026-11-01T04:00:00Z", 3) == [
        "2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-02T01:00:00-05:00"]


# --- calendar features -------------------------------------------------------------------------

def test_leap_day():
    assert local("0 0 29 2 *", "UTC", "2026-01-01T00:00:00Z", 3) == [
        "2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z", "2036-02-29T00:00:00Z"]


def test_leap_day_across_a_skipped_century_leap_year():
    # 2100 is not a leap year: the gap is 8 years, within the horizon.
    assert local("0 0 29 2 *", "UTC", "2096-03-01T00:00:00Z", 1) == ["2104-02-29T00:00:00Z"]


def test_last_day_of_month():
    assert local("0 12 L * *", "UTC", "2028-01-15T00:00:00Z", 3) == [
        "2028-01-31T12:00:00Z", "2028-02-29T12:00:00Z", "2028-03-31T12:00:00Z"]


def test_nearest_weekday():
    # 2026-02-15 is a Sunday -> Monday 16th; 2026-03-15 is a Sunday too; 2026-08-15 Saturday -> Friday 14th.
    assert local("0 9 15W * *", "UTC", "2026-02-01T00:00:00Z", 2) == [
        "2026-02-16T09:00:00Z", "2026-03-16T09:00:00Z"]
    assert local("0 9 15W 8 *", "UTC", "2026-02-01T00:00:00Z", 1) == ["2026-08-14T09:00:00Z"]


def test_nth_weekday_of_month():
    # The second Monday.
    assert local("0 0 * * 1#2", "UTC", "2026-01-01T00:00:00Z", 3) == [
        "2026-01-12T00:00:00Z", "2026-02-09T00:00:00Z", "2026-03-09T00:00:00Z"]


def test_last_weekday_of_month():
    # The last Friday.
    assert local("0 0 * * L5", "UTC", "2026-01-01T00:00:00Z", 2) == [
        "2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z"]


def test_seconds_field_comes_first():
    assert local("*/15 * * * * *", "UTC", "2026-01-01T00:00:00Z", 3) == [
        "2026-01-01T00:00:15Z", "2026-01-01T00:00:30Z", "2026-01-01T00:00:45Z"]
    assert local("30 0 12 * * *", "UTC", "2026-01-01T00:00:00Z", 1) == ["2026-01-01T12:00:30Z"]


def test_every_second_is_strictly_after_a_millisecond_start():
    spec = cron.parse("* * * * * *")
    assert cron.fires(spec, 1_000_500, 3) == [1_001_000, 1_002_000, 1_003_000]
    assert cron.next_fire_ms(spec, 1_001_000) == 1_002_000


@pytest.mark.parametrize("macro, first", [
    ("@hourly", "2026-01-01T01:00:00Z"), ("@daily", "2026-01-02T00:00:00Z"),
    ("@midnight", "2026-01-02T00:00:00Z"), ("@weekly", "2026-01-04T00:00:00Z"),
    ("@monthly", "2026-02-01T00:00:00Z"), ("@yearly", "2027-01-01T00:00:00Z"),
    ("@annually", "2027-01-01T00:00:00Z"), ("@DAILY", "2026-01-02T00:00:00Z")])
def test_macros(macro, first):
    assert local(macro, "UTC", "2026-01-01T00:00:00Z", 1) == [first]


def test_macro_in_a_zone():
    assert local("@daily", "Asia/Kolkata", "2026-01-01T00:00:00Z", 1) == ["2026-01-02T00:00:00+05:30"]


def test_hashed_fields_are_stable_per_id_and_spread_across_ids():
    def first(hash_id: str) -> list[str]:
        return local("H H * * *", "UTC", "2026-01-01T00:00:00Z", 2, hash_id)

    assert first("nightly-report") == first("nightly-report")
    picks = {first(f"sched-{i}")[0] for i in range(20)}
    assert len(picks) >= 10  # 1440 slots a day: 20 ids rarely collide
    a = first("nightly-report")
    assert a[1] == (dt.datetime.fromisoformat(a[0]) + dt.timedelta(days=1)).isoformat().replace("+00:00", "Z")


def test_hashed_step_keeps_its_period():
    spec = cron.parse("H/15 * * * *", "UTC", "abc")
    got = cron.fires(spec, ms("2026-01-01T00:00:00Z"), 4)
    assert [b - a for a, b in zip(got, got[1:])] == [15 * 60_000] * 3
    assert got[0] < ms("2026-01-01T00:15:00Z")


# --- refusals ----------------------------------------------------------------------------------

@pytest.mark.parametrize("expr", [
    "", "   ", "* * * *", "* * * * * * *", "61 * * * *", "* 24 * * *", "0 0 32 * *",
    "0 0 * 13 *", "0 0 * * 8", "*/0 * * * *", "a b c d e", "@reboot", "@every 5m",
    "0 0 * * 1#6", "0 0 0W * *", "x" * 300])
def test_invalid_expressions_are_refused(expr):
    with pytest.raises(cron.CronError):
        cron.parse(expr)


@pytest.mark.parametrize("expr, field, bad, accepted", [
    ("61 * * * *", "minute", "61", "0-59"), ("0 24 * * *", "hour", "24", "0-23"),
    ("0 0 32 * *", "day of month", "32", "1-31"), ("0 0 * 13 *", "month", "13", "1-12"),
    ("0 0 * * 8", "day of week", "8", "0-7"), ("0 */0 * * *", "hour", "*/0", "0-23"),
    ("61 0 0 * * *", "second", "61", "0-59"), ("0 60 0 * * *", "minute", "60", "0-59")])
def test_a_refusal_names_the_field_and_its_range(expr, field, bad, accepted):
    with pytest.raises(cron.CronError) as e:
        cron.parse(expr)
    assert f"the {field} field {bad!r} is not valid" in str(e.value)
    assert f"the {field} takes {accepted}" in str(e.value)


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *", "0 0 0 30 2 *"])
def test_never_firing_expressions_are_refused(expr):
    with pytest.raises(cron.CronError, match="never fires"):
        cron.parse(expr)


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "../../etc/passwd", "UTC+5", "x" * 100])
def test_unknown_zones_are_refused(zone):
    with pytest.raises(cron.CronError, match="time zone"):
        cron.parse("* * * * *", zone)


def test_cron_error_is_a_value_error():
    assert issubclass(cron.CronError, ValueError)


def test_format_local_keeps_milliseconds_and_offset():
    zone = cron.load_zone("Europe/Berlin")
    assert cron.format_local(ms("2026-07-01T10:00:00.250Z"), zone) == "2026-07-01T12:00:00.250+02:00"


def test_a_range_with_equal_ends_is_one_value():
    # croniter alone reads `0-0` in the day-of-week field as every day.
    assert local("0 0 * * 0-0", "UTC", "2026-01-01T00:00:00Z", 2) == [
        "2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"]


def test_day_fields_are_or_ed_only_when_neither_starts_with_a_star():
    # Vixie cron semantics: `*/1` counts as unrestricted, so day 1 AND any weekday.
    assert local("0 0 1 * */1", "UTC", "2026-01-02T00:00:00Z", 1) == ["2026-02-01T00:00:00Z"]
    # Both restricted: the 13th OR any Friday.
    assert local("0 0 13 * 5", "UTC", "2026-02-01T00:00:00Z", 3) == [
        "2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"]


def test_new_york_fall_back_step_hour_fires_in_both_occurrences():
    assert local("0 */1 * * *", "America/New_York", "2026-11-01T04:30:00Z", 4) == [
        "2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00",
        "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"]


def test_no_fire_past_year_9999_is_none_not_an_error():
    spec = cron.parse("* * * * *")
    last_minute_ms = ms("9999-12-31T23:59:00Z")
    assert cron.fires(spec, last_minute_ms - 60_000, 3) == [last_minute_ms]
    assert cron.next_fire_ms(spec, last_minute_ms) is None
    assert cron.next_fire_ms(cron.parse("0 0 29 2 *"), ms("9997-01-01T00:00:00Z")) is None
