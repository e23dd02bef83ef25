"""The submit's decision (scheduling/submits.py) driven with a `SubmitRequest` against a
real single-node replica and proposer: the scope check, admission, one task or a batch."""
from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest

from tsched.statemachine import commands as c

from tsched.node.clock import Clock
from tsched.node.errors import ApiError
from tsched.node.raft.replica import Replica
from tsched.node.scheduling import submits
from tsched.node.scheduling.submits import SubmitRequest

from tests.unit.node.scheduling.services_support import Services, proposing


class FakePlace:
    """A place that records what it was asked; `refuse`: a busy node's answer."""

    def __init__(self, refuse: bool = False) -> None:
        self.asked: list[Sequence[int]] = []
        self.urgent = False
        self._refuse = refuse

    def admit(self, priorities: Sequence[int]) -> None:
        self.asked.append(priorities)
        self.urgent = max(priorities) <= 1
        if self._refuse and not self.urgent:
            raise ApiError("overloaded", "busy", {"reason": "busy", "retry_after_s": 1})


@pytest.fixture
async def node(replica: Replica) -> Services:
    return proposing(replica)


def _cmd(tenant: str = "default", priority: int = 5) -> c.SubmitTask:
    return c.SubmitTask(request_id=uuid.uuid4().hex, now_ms=Clock().now_ms(),
                        task_id=uuid.uuid4().hex, task_type="email", tenant=tenant,
                        priority=priority)


def _req(*cmds: c.SubmitTask, batch: bool = False, tenant: str | None = None,
         minimal: bool = False) -> SubmitRequest:
    return SubmitRequest(commands=cmds, priorities=tuple(x.priority for x in cmds),
                         tenant=tenant, batch=batch, minimal=minimal)


async def test_one_task_is_answered_by_the_task(node: Services) -> None:
    cmd, place = _cmd(priority=0), FakePlace()
    answers, seq = await submits.submit(node, _req(cmd), place)
    assert place.asked == [(0,)] and place.urgent
    [task] = answers
    assert isinstance(task, dict) and task["task_id"] == cmd.task_id
    assert task["state"] == "pending" and task["duplicate"] is False and seq > 0


async def test_a_batch_is_answered_in_order_and_minimal_when_asked(node: Services) -> None:
    cmds = [_cmd(priority=p) for p in (3, 7, 1)]
    place = FakePlace()
    answers, _ = await submits.submit(node, _req(*cmds, batch=True, minimal=True), place)
    assert place.asked == [(3, 7, 1)]
    assert [a["task_id"] for a in answers if isinstance(a, dict)] == [x.task_id for x in cmds]
    assert all(isinstance(a, dict) and set(a) == {"task_id", "state", "duplicate"}
               for a in answers)


async def test_another_tenants_task_is_forbidden_before_admission(node: Services) -> None:
    place = FakePlace()
    with pytest.raises(ApiError) as e:
        await submits.submit(node, _req(_cmd("acme"), _cmd("globex"), batch=True,
                                        tenant="acme"), place)
    assert e.value.code == "forbidden" and place.asked == []


async def test_a_refused_submit_proposes_nothing(node: Services) -> None:
    cmd = _cmd(priority=5)
    with pytest.raises(ApiError) as e:
        await submits.submit(node, _req(cmd), FakePlace(refuse=True))
    assert e.value.code == "overloaded"
    with node.replica.read() as sm:
        assert sm.get_task(cmd.task_id) is None
