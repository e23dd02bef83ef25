"""`Admission` (DESIGN 14.2): submits in progress at a node, refused `busy` past a bound."""
from __future__ import annotations

import pytest

from tsched.node.api.admission import Admission
from tsched.node.errors import ApiError


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_submit_over_the_in_progress_bound_is_refused_busy_and_a_place_comes_back():
    a = Admission(in_progress_max=2, wait_ms_max=60_000, clock=FakeClock())
    with a.submit(), a.submit():
        with pytest.raises(ApiError) as err, a.submit():
            pass
        assert err.value.code == "overloaded" and err.value.status == 429
        assert err.value.details["reason"] == "busy"
        assert err.value.details["in_progress"] == 2
        assert err.value.details["retry_after_s"] >= 1
        assert a.in_progress == 2 and a.refused == 1
    assert a.in_progress == 0
    with a.submit():
        assert a.in_progress == 1


def test_a_submit_is_refused_while_the_oldest_in_progress_has_waited_too_long():
    clock = FakeClock()
    a = Admission(in_progress_max=100, wait_ms_max=5_000, clock=clock)
    with a.submit():
        clock.now += 1.0
        with a.submit():        # the oldest has waited 1 s: admitted
            clock.now += 4.0
            with pytest.raises(ApiError) as err, a.submit():
                pass
            assert err.value.details["oldest_wait_ms"] == 5_000
        with pytest.raises(ApiError):      # the oldest is still in progress
            with a.submit():
                pass
    with a.submit():            # the old one finished: the next is admitted
        assert a.oldest_wait_s() == 0.0


def test_a_failing_submit_gives_its_place_back():
    a = Admission(in_progress_max=1, wait_ms_max=60_000, clock=FakeClock())
    with pytest.raises(ValueError), a.submit():
        raise ValueError("invalid body")
    assert a.in_progress == 0
