"""A Worker's priority range and RetryLater's outcome (DESIGN 9)."""
from __future__ import annotations

import pytest

from tsched.client import App, RetryLater, Worker
from tsched.client._claiming import check_priorities
from tsched.client._jobs import outcome_of


@pytest.mark.parametrize("value, want", [
    (None, None), ((0, 3), (0, 3)), ([2, 2], (2, 2)), ("0-3", (0, 3)), (" 7 ", (7, 7)),
    ("4-10", (4, 10))])
def test_ranges_are_read(value, want):
    assert check_priorities(value) == want


@pytest.mark.parametrize("value", [(3, 0), (0, 11), (-1, 2), ("a", 1), "3-", "x-1", (1,),
                                   (True, 2), "0-3-5"])
def test_bad_ranges_raise(value):
    with pytest.raises(ValueError):
        check_priorities(value)


def test_worker_and_app_keep_their_range():
    assert Worker("http://127.0.0.1:1", {"t": print}, priorities="0-3").priorities == (0, 3)
    assert Worker("http://127.0.0.1:1", {"t": print}).priorities is None
    assert App("http://127.0.0.1:1", priorities=(4, 6)).priorities == (4, 6)
    with pytest.raises(ValueError):
        Worker("http://127.0.0.1:1", {"t": print}, priorities=(5, 1))


def test_retry_later_reports_its_delay_and_is_retryable():
    assert outcome_of(exc=RetryLater(2.5)) == {
        "error": outcome_of(exc=RetryLater(2.5))["error"], "retryable": True,
        "retry_after_s": 2.5}
    with pytest.raises(ValueError):
        RetryLater(0)
