"""The suite's one polling helper: wait for a condition, with a bound and a message."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(cond: Callable[[], T], timeout_s: float = 10.0, what: str = "condition",
               step_s: float = 0.05) -> T:
    """Call `cond` until it returns something true, and return that; an AssertionError
    naming `what` once `timeout_s` has passed. The bound is only a bound: a condition met
    sooner ends the wait sooner. Pauses start at 1 ms and double up to `step_s`, so a
    condition met at once costs nearly nothing and a long wait does not keep a busy
    cluster answering status calls."""
    deadline = time.monotonic() + timeout_s
    pause_s = 0.001
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(pause_s)
        pause_s = min(step_s, pause_s * 2)
