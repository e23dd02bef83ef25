"""Reserved worker capacity (DESIGN 5.1): `Worker(reserve=...)`, `tsworker --reserve`:
the option read, the slots split into lanes, and the lanes' claims (against a fake node)."""
from __future__ import annotations

from fractions import Fraction

import pytest

from tsched.client import App, Worker
from tsched.client._reserve import Lane, check_reserve, describe, split_slots

try:
    from test_worker import DEADLINE_S, FakeScheduler, Running, make, wait_for
    from client_support import FakeNode
except ImportError:  # collected as a package
    from tests.unit.client.test_worker import DEADLINE_S, FakeScheduler, Running, make, wait_for
    from tests.unit.client.client_support import FakeNode

URL = "http://127.0.0.1:1"


@pytest.mark.parametrize("value, want", [
    (None, {}), ({}, {}),
    ({"low": 0.1}, {"low": Fraction(1, 10)}),
    ({"low": "10%", "high": "0.25"}, {"low": Fraction(1, 10), "high": Fraction(1, 4)}),
    ("low=10%", {"low": Fraction(1, 10)}),
    (" low = 0.1 , batch=5% ", {"low": Fraction(1, 10), "batch": Fraction(1, 20)}),
    (["low=10%", "critical=0.3"], {"low": Fraction(1, 10), "critical": Fraction(3, 10)}),
    ({"normal": 0.7}, {"normal": Fraction(7, 10)}),     # exact: 0.7, not 0.69999...
])
def test_the_option_is_read(value, want):
    assert check_reserve(value) == want


@pytest.mark.parametrize("value, message", [
    ({"slow": 0.1}, "unknown tier 'slow'"),
    ("low", "tier=share"), ("low=", "tier=share"), ("=0.1", "tier=share"),
    ({"low": 0}, "above 0"), ({"low": 1}, "below 1"), ("low=100%", "below 1"),
    ("low=-5%", "above 0"), ({"low": "ten"}, "fraction"), ({"low": True}, "fraction"),
    ({"low": None}, "fraction"), ("low=1/0", "fraction"),
    ("low=0.1,low=0.2", "named twice"), ([3], "tier=share"), (42, "reserve must be"),
])
def test_a_bad_option_raises_naming_reserve(value, message):
    with pytest.raises(ValueError) as err:
        check_reserve(value)
    assert "reserve" in str(err.value) and message in str(err.value)


@pytest.mark.parametrize("concurrency, reserve, priorities, lanes", [
    (10, {"low": 0.1}, None, [Lane(None, 9, None), Lane("low", 1, (7, 9))]),
    (10, {"low": 0.11}, None, [Lane(None, 8, None), Lane("low", 2, (7, 9))]),   # ceil
    (10, {"normal": 0.7}, None, [Lane(None, 3, None), Lane("normal", 7, (4, 6))]),
    (4, {"batch": 0.01, "high": 0.25}, (0, 10),                                 # at least 1
     [Lane(None, 2, (0, 10)), Lane("batch", 1, (10, 10)), Lane("high", 1, (1, 3))]),
    (5, {"low": 0.2}, (4, 8), [Lane(None, 4, (4, 8)), Lane("low", 1, (7, 8))]),  # within
])
def test_slots_are_split_into_lanes(concurrency, reserve, priorities, lanes):
    assert split_slots(concurrency, check_reserve(reserve), priorities) == lanes
    assert sum(lane.slots for lane in lanes) == concurrency


@pytest.mark.parametrize("concurrency, reserve, priorities, message", [
    (1, {"low": 0.1}, None, "at least one must be left unreserved"),
    (2, {"low": 0.1, "high": 0.1}, None, "2 of the worker's 2 slots"),
    (10, {"low": 0.95}, None, "10 of the worker's 10 slots"),
    (10, {"low": 0.1}, (0, 3), "outside the worker's priorities 0-3"),
])
def test_a_reserve_that_does_not_fit_raises(concurrency, reserve, priorities, message):
    with pytest.raises(ValueError) as err:
        split_slots(concurrency, check_reserve(reserve), priorities)
    assert str(err.value).startswith("reserve: ") and message in str(err.value)


def test_worker_and_app_check_and_keep_their_reserve():
    w = Worker(URL, {"t": print}, concurrency=10, reserve={"low": 0.1})
    assert w.reserve == {"low": Fraction(1, 10)}
    assert describe(w._lanes) == "low 1 slot, the rest 9"
    assert Worker(URL, {"t": print}).reserve == {} and Worker(URL, {"t": print})._lanes == []
    assert App(URL, reserve="low=10%").reserve == {"low": Fraction(1, 10)}
    with pytest.raises(ValueError, match="reserve"):
        Worker(URL, {"t": print}, concurrency=1, reserve={"low": 0.1})
    with pytest.raises(ValueError, match="reserve"):
        App(URL, reserve={"nope": 0.1})


@pytest.fixture
def fake():
    node = FakeNode()
    yield FakeScheduler(node)
    node.close()


def test_each_lane_claims_its_range_with_its_own_id_and_window(fake):
    for i in range(6):
        fake.add(f"t{i}")
    ran: list[str] = []
    w = make(fake, {"t": lambda payload, ctx: ran.append(ctx.task_id)}, concurrency=4,
             reserve={"low": 0.25, "high": 0.25}, worker_id="w1", claim_ahead=8)
    with Running(w):
        wait_for(lambda: len(fake.reports) == 6, "six reports")
    assert sorted(ran) == [f"t{i}" for i in range(6)]
    claims = fake.node.requests("POST", "/v1/claims")
    kinds = {(c.body["worker_id"], c.body.get("priority_min"), c.body.get("priority_max"))
             for c in claims}
    assert kinds == {("w1", None, None), ("w1/low", 7, 9), ("w1/high", 1, 3)}
    # each lane's window starts at its share: 2 slots + 4 ahead, 1 + 2, 1 + 2 (a lane whose
    # claims come back full widens it afterwards, as any Worker does)
    first: dict[str, int] = {}
    for c in claims:
        first.setdefault(c.body["worker_id"], c.body["max_tasks"])
    assert first == {"w1": 6, "w1/low": 3, "w1/high": 3}
    assert w.running == 0


def test_stop_before_run_and_a_second_stop_reach_every_lane(fake):
    w = make(fake, {"t": print}, concurrency=3, reserve={"low": 0.3})
    w.stop()
    w.run()         # returns at once: every lane was asked to stop before it started
    began = []

    def handler(payload, ctx):
        began.append(ctx.task_id)
        ctx.cancelled.wait(DEADLINE_S)
        return "too late"
    fake.add("a")
    w = make(fake, {"t": handler}, concurrency=3, reserve={"low": 0.3}, grace_s=3600)
    with Running(w):
        wait_for(lambda: began, "the task began")
        w.stop()
        w.stop()    # a second stop: the lanes do not wait an hour
        wait_for(lambda: w.running == 0, "the lanes stopped")
    assert fake.released == ["a"] and fake.reports == []
