"""`Admission` (DESIGN 14.2, 5.1): submits in progress at a node; past the soft bound only
urgent submits are admitted (their body is read first), past the hard bound none is."""
from __future__ import annotations

from contextlib import ExitStack

import pytest

from tsched.node.api.admission import Admission
from tsched.node.api.jsonio import status_of
from tsched.node.errors import ApiError
from tsched.statemachine.limits import API_LIMITS


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _admission(*, in_progress_max: int = 2, wait_ms_max: int = 60_000,
               clock: FakeClock | None = None) -> Admission:
    return Admission(in_progress_max=in_progress_max, wait_ms_max=wait_ms_max,
                     urgent_priority_max=3, urgent_bound_factor=2, clock=clock or FakeClock())


def _hold(stack: ExitStack, a: Admission, n: int, priority: int = 5) -> None:
    """n admitted submits in progress."""
    for _ in range(n):
        stack.enter_context(a.submit()).admit([priority])


def test_the_defaults_are_the_design_s():
    assert API_LIMITS.urgent_priority_max == 3 and API_LIMITS.urgent_bound_factor == 2


def test_under_the_soft_bound_every_submit_is_admitted():
    a = _admission()
    with ExitStack() as stack:
        _hold(stack, a, 1, priority=10)
        with a.submit() as place:
            place.admit([9, 10])
            assert not place.urgent and a.in_progress == 2
    assert a.in_progress == 0 and a.shed == {}


def test_between_the_bounds_only_a_submit_of_urgent_tasks_is_admitted_after_its_body():
    a = _admission()
    with ExitStack() as stack:
        _hold(stack, a, 2)                     # at the soft bound
        with a.submit() as place:              # not refused before its body is read
            assert a.in_progress == 3
            place.admit([0, 3, 1])
            assert place.urgent
        with pytest.raises(ApiError) as err, a.submit() as place:
            place.admit([9])
        e = err.value
        assert (e.code, status_of(e), e.details["reason"]) == ("overloaded", 429, "busy")
        assert e.details["in_progress"] == 2 and e.details["in_progress_max"] == 2
        assert e.details["retry_after_s"] == API_LIMITS.busy_retry_after_s
        # a batch with one task that is not urgent is refused whole; counted by its most
        # urgent task's tier
        with pytest.raises(ApiError), a.submit() as place:
            place.admit([0, 4])
        assert a.in_progress == 2
    assert a.shed == {("busy", "low"): 1, ("busy", "critical"): 1} and a.refused == 2


def test_past_the_hard_bound_every_submit_is_refused_before_its_body():
    a = _admission()
    with ExitStack() as stack:
        _hold(stack, a, 2)
        _hold(stack, a, 2, priority=0)         # urgent ones fill up to the hard bound
        with pytest.raises(ApiError) as err, a.submit():
            pytest.fail("admitted past the hard bound")
        assert err.value.details["in_progress"] == err.value.details["in_progress_max"] == 4
        assert err.value.details["reason"] == "busy"
    assert a.shed == {("busy", "unknown"): 1}
    with a.submit() as place:                  # the places came back
        place.admit([9])


def test_the_oldest_wait_has_a_soft_and_a_hard_bound_too():
    clock = FakeClock()
    a = _admission(in_progress_max=100, wait_ms_max=5_000, clock=clock)
    with a.submit() as old:
        old.admit([9])
        clock.now += 4.0
        with a.submit() as place:              # the oldest has waited 4 s: admitted
            place.admit([9])
        clock.now += 1.0
        with pytest.raises(ApiError) as err, a.submit() as place:
            place.admit([7])
        assert err.value.details["oldest_wait_ms"] == 5_000
        with a.submit() as place:              # 5 s: urgent still admitted
            place.admit([2])
        clock.now += 5.0
        with pytest.raises(ApiError) as err, a.submit():    # 10 s: none, before the body
            pytest.fail("admitted past the hard bound")
        assert err.value.details["oldest_wait_ms"] == 10_000
    with a.submit() as place:                  # the old one finished: admitted again
        place.admit([9])
        assert a.oldest_wait_s() == 0.0
    assert a.shed == {("busy", "low"): 1, ("busy", "unknown"): 1}


def test_a_failing_submit_gives_its_place_back():
    a = _admission(in_progress_max=1)
    with pytest.raises(ValueError), a.submit():
        raise ValueError("invalid body")
    assert a.in_progress == 0


def test_a_full_queue_s_refusal_is_counted_per_task_by_its_tier():
    a = _admission()
    full = ApiError("overloaded", "queue full", {"reason": "queue_full", "retry_after_s": 1})
    with pytest.raises(ApiError), a.submit() as place:
        place.admit([0, 5, 5])
        raise full
    other = ApiError("overloaded", "shed", {"reason": "priority"})
    with pytest.raises(ApiError), a.submit() as place:   # not this node's refusal
        place.admit([9])
        raise other
    assert a.shed == {("queue_full", "critical"): 1, ("queue_full", "normal"): 2}
    assert a.refused == 0 and a.in_progress == 0


def test_the_tier_table_is_the_cluster_s():
    from tsched.statemachine.tiers import parse_tiers
    tiers = parse_tiers([{"name": "now", "min": 0, "max": 4},
                         {"name": "later", "min": 5, "max": 10}])
    a = Admission(in_progress_max=1, wait_ms_max=60_000, tiers=tiers, clock=FakeClock())
    with a.submit() as held:
        held.admit([9])
        with pytest.raises(ApiError), a.submit() as place:
            place.admit([4, 6])     # 4 is not urgent (priority above 3), its tier is "now"
    assert a.shed == {("busy", "now"): 1}
