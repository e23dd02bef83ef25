"""Helpers shared by the state machine tests (no tests here)."""
from __future__ import annotations

import pytest

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import commands as c

T0 = 1_700_000_000_000   # an epoch-ms instant the tests start at
# The optional compiled build (setup.py, TSCHED_COMPILE=1) runs these tests too
# (tests/integration/test_compiled_build.py). Its Task keeps ints unboxed: there is no int
# object for equal values to share, which the Python build's memory tests check.
COMPILED = hasattr(StateMachine, "__mypyc_attrs__")
INT_OBJECTS = pytest.mark.skipif(COMPILED, reason="a compiled build keeps ints unboxed")


class Driver:
    """Applies commands with fresh request ids at a controllable clock."""

    def __init__(self, limits: Limits | None = None, now_ms: int = T0) -> None:
        self.sm = StateMachine(limits=limits)
        self.now = now_ms
        self.n = 0
        self.tasks = 0

    def run(self, cls, **fields):
        self.n += 1
        fields.setdefault("request_id", f"req-{self.n}")
        fields.setdefault("now_ms", self.now)
        return self.sm.apply(cls(**fields))

    def ok(self, cls, **fields):
        result = self.run(cls, **fields)
        assert result.ok, result
        return result.value

    def submit(self, task_id: str | None = None, tenant: str = "acme", task_type: str = "email",
               **fields):
        if task_id is None:
            self.tasks += 1
            task_id = f"t{self.tasks}"
        return self.run(c.SubmitTask, task_id=task_id, tenant=tenant, task_type=task_type,
                        **fields)

    def add(self, task_id: str | None = None, **fields):
        result = self.submit(task_id, **fields)
        assert result.ok, result
        return result.value["task"]

    def claim(self, task_types=("email",), worker_id: str = "w1", **fields):
        return self.ok(c.Claim, worker_id=worker_id, task_types=tuple(task_types),
                       **fields)["tasks"]

    def claim_one(self, **fields):
        tasks = self.claim(**fields)
        assert len(tasks) == 1, tasks
        return tasks[0]

    def tick(self, now_ms: int | None = None):
        if now_ms is not None:
            self.now = now_ms
        return self.run(c.Tick)

    def advance(self, ms: int):
        self.now += ms
        return self.tick()
