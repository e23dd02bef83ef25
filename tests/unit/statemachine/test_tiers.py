"""Priority tiers (DESIGN 5.1): the default table, `[[priority.tiers]]` parsing with its
refusals, tier lookup and the ranges workers name."""
from __future__ import annotations

import pytest

from tsched.statemachine.tiers import (DEFAULT_TIERS, TierError, by_name, parse_range,
                                       parse_tiers, tier_of, to_json)


def test_the_default_tiers_are_the_designs_five():
    assert [(t.name, t.lo, t.hi, t.sla_s) for t in DEFAULT_TIERS] == [
        ("critical", 0, 0, 1.0), ("high", 1, 3, 5.0), ("normal", 4, 6, 60.0),
        ("low", 7, 9, 3600.0), ("batch", 10, 10, None)]
    assert parse_tiers(None) is DEFAULT_TIERS


@pytest.mark.parametrize("priority, name", [(0, "critical"), (1, "high"), (3, "high"),
                                            (4, "normal"), (9, "low"), (10, "batch"),
                                            (-3, "critical"), (12, "batch")])
def test_every_priority_has_one_tier(priority, name):
    assert tier_of(priority).name == name


def test_a_table_of_two_tiers():
    tiers = parse_tiers([{"name": "now", "min": 0, "max": 2, "sla_s": 2},
                         {"name": "later", "min": 3, "max": 10}])
    assert [(t.name, t.lo, t.hi, t.sla_s) for t in tiers] == [("now", 0, 2, 2.0),
                                                              ("later", 3, 10, None)]
    assert tier_of(5, tiers).name == "later"
    assert to_json(tiers)[0] == {"name": "now", "priority_min": 0, "priority_max": 2,
                                 "sla_s": 2.0}


@pytest.mark.parametrize("raw, words", [
    ([], "1 to 11 tiers"),
    ({"name": "x"}, "1 to 11 tiers"),
    ([{"name": "a", "min": 0, "max": 4}, {"name": "b", "min": 6, "max": 10}], "starts at 6"),
    ([{"name": "a", "min": 0, "max": 4}, {"name": "b", "min": 3, "max": 10}], "starts at 3"),
    ([{"name": "a", "min": 0, "max": 9}], "end at 10"),
    ([{"name": "a", "min": 0, "max": 4}, {"name": "a", "min": 5, "max": 10}], "must differ"),
    ([{"name": "A", "min": 0, "max": 10}], "name must match"),
    ([{"name": "a", "min": 4, "max": 2}], "min <= max"),
    ([{"name": "a", "min": 0, "max": 11}], "min <= max"),
    ([{"name": "a", "min": 0, "max": 10, "sla_s": 0}], "sla_s"),
    ([{"name": "a", "min": 0, "max": 10, "sla_s": True}], "sla_s"),
    ([{"name": "a", "min": 0, "max": 10, "weight": 3}], "keys are"),
])
def test_a_bad_table_is_refused_naming_why(raw, words):
    with pytest.raises(TierError, match=words):
        parse_tiers(raw)


@pytest.mark.parametrize("spec, lo_hi", [("0-3", (0, 3)), ("5", (5, 5)), ("critical", (0, 0)),
                                         ("critical,high", (0, 3)), ("low, normal", (4, 9)),
                                         ("batch", (10, 10))])
def test_ranges_by_number_or_adjacent_tier_names(spec, lo_hi):
    assert parse_range(spec) == lo_hi


@pytest.mark.parametrize("spec, words", [("critical,low", "not adjacent"),
                                         ("urgent", "unknown tier 'urgent'"),
                                         ("4-2", "0 <= LO <= HI"), ("3-x", "LO-HI"),
                                         ("0-11", "0 <= LO <= HI")])
def test_a_bad_range_is_refused_naming_why(spec, words):
    with pytest.raises(TierError, match=words):
        parse_range(spec)


def test_by_name_lists_the_known_names():
    with pytest.raises(TierError, match="known: critical, high, normal, low, batch"):
        by_name("urgent")
