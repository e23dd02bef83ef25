"""`ReadBudget` (node/api/read_budget.py, DESIGN 7): a node's token bucket of listing pages,
with an injected clock. A page within the burst is served at once, the next ones wait for
their turn in order while it comes within the bound, past it a 429 with Retry-After takes
nothing; a client reading one page after another is paced, never refused."""
from __future__ import annotations

import asyncio

import pytest

from tsched.node.api.jsonio import error_response
from tsched.node.api.read_budget import ReadBudget
from tsched.node.errors import ApiError
from tsched.statemachine.limits import API_LIMITS


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _budget(clock: FakeClock, rate: float = 10, burst: int = 3,
            wait_ms_max: int = 1000) -> ReadBudget:
    return ReadBudget(rate, burst, wait_ms_max, clock=clock)


def test_the_burst_is_served_at_once_then_pages_wait_their_turn_in_order():
    clock = FakeClock()
    b = _budget(clock)
    assert [b.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    # 10 a second: the 4th page's token comes in 0.1 s, the 5th's in 0.2 s
    assert [round(b.reserve(), 9) for _ in range(2)] == [0.1, 0.2]
    assert (b.served, b.waited, b.refused) == (3, 2, 0)


def test_past_the_wait_bound_a_page_is_refused_429_with_retry_after_and_takes_nothing():
    clock = FakeClock()
    b = _budget(clock)
    waits = [b.reserve() for _ in range(3 + 10)]     # the burst, then 1.0 s of turns
    assert round(waits[-1], 9) == 1.0
    with pytest.raises(ApiError) as e:
        b.reserve()                                  # its turn would be 1.1 s away
    err = e.value
    assert err.code == "overloaded"
    assert err.details["reason"] == "read_budget"
    assert err.details["retry_after_s"] == 1
    answer = error_response(err, 7)
    assert answer.status == 429 and answer.headers["Retry-After"] == "1"
    assert b.refused == 1
    assert round(b.tokens(), 9) == -10                # the refusal took no token
    clock.now += 0.1                                  # one token back: a turn within 1 s
    assert round(b.reserve(), 9) == 1.0


def test_retry_after_says_when_the_wait_would_be_within_the_bound():
    clock = FakeClock()
    b = _budget(clock, rate=1, burst=1, wait_ms_max=1000)
    assert b.reserve() == 0.0 and b.reserve() == 1.0
    with pytest.raises(ApiError) as e:
        b.reserve()                                   # 2 s away: 1 s past the bound
    assert e.value.details["retry_after_s"] == 1
    for _ in range(5):                                # refusals do not push it further
        with pytest.raises(ApiError):
            b.reserve()
    clock.now += 1.0
    assert b.reserve() == 1.0


def test_tokens_come_back_at_the_rate_up_to_the_burst():
    clock = FakeClock()
    b = _budget(clock)
    for _ in range(3):
        b.reserve()
    clock.now += 0.25                                 # 2.5 tokens
    assert round(b.tokens(), 9) == 2.5
    clock.now += 3600                                 # idle: never more than the burst
    assert b.tokens() == 3
    assert [b.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]


def test_a_client_reading_one_page_after_another_is_paced_never_refused():
    """Each page is asked once the last one's wait is over (the slowest rate the
    configuration allows, 1 page a second, and the default bound): the bucket is never in
    debt when the next page comes, so each waits at most one token's interval."""
    clock = FakeClock()
    b = _budget(clock, rate=1, burst=2, wait_ms_max=API_LIMITS.list_wait_ms_max)
    waits = []
    for _ in range(50):
        wait_s = b.reserve()
        waits.append(wait_s)
        clock.now += wait_s + 0.0001                 # the answer, then the next ask
    assert b.refused == 0
    assert max(waits) <= 1.0 and waits[:2] == [0.0, 0.0]


def test_no_budget_at_rate_zero():
    clock = FakeClock()
    b = _budget(clock, rate=0)
    assert not b.enabled
    assert all(b.reserve() == 0.0 for _ in range(10_000))


def test_take_waits_for_its_turn_on_the_event_loop():
    clock = FakeClock()
    b = _budget(clock, burst=1)

    async def two_pages() -> None:
        await b.take()
        await b.take()        # 0.1 s of the fake clock, slept for real
    asyncio.run(two_pages())
    assert (b.served, b.waited, b.refused) == (1, 1, 0)


def test_the_defaults_page_a_sequential_reader_within_the_wait_bound():
    assert API_LIMITS.list_pages_per_s >= 1000 / API_LIMITS.list_wait_ms_max
    assert 1 <= API_LIMITS.list_burst_pages
