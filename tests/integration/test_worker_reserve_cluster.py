"""Reserved worker capacity on a real 3-node cluster (DESIGN 5.1): a Worker of concurrency
10 with `reserve={"low": 0.1}` runs a few low tasks to completion while a flood of critical
ones is still pending; without the reserve the low tasks are claimed only once every
critical task has been.

Order, not timing: the critical handlers of the first test block until the low tasks are
done (so the flood is certainly still there), and the second test compares fencing tokens,
which the state machine hands out in claim order."""
from __future__ import annotations

import threading
import uuid

import pytest

from tsched.client import Client, Worker

from tests.harness.waits import wait_until
from tests.integration.worker_support import running

pytestmark = pytest.mark.slow
FLOOD = 80        # critical tasks: more than the worker's window (4 x its slots) holds
LOW = 5
WAIT_S = 120      # a bound on every wait, for a loaded machine


def _submit(c: Client, tt: str) -> tuple[list[str], list[str]]:
    def batch(tier: str, priority: int, n: int) -> list[str]:
        tasks = c.submit_many([{"task_type": tt, "payload": {"tier": tier, "i": i},
                                "priority": priority} for i in range(n)], minimal=True)
        return [t["task_id"] for t in tasks]
    return batch("critical", 0, FLOOD), batch("low", 8, LOW)


def _states(c: Client, ids: list[str]) -> list[str]:
    """The tasks' states, in the order of `ids` (one listing of their task type)."""
    tt = c.get(ids[0])["task_type"]
    states = {t["task_id"]: t["state"] for t in c.list(task_type=tt)}
    return [states.get(tid, "missing") for tid in ids]


def test_a_reserved_slot_serves_low_tasks_while_a_critical_flood_waits(cluster):
    tt = f"reserve-{uuid.uuid4().hex[:8]}"
    gate = threading.Event()           # the critical handlers wait for it

    def handler(payload, ctx):
        if payload["tier"] == "critical":
            gate.wait(WAIT_S)
        return payload["tier"]

    with Client(cluster.urls, timeout_s=60) as c:
        critical, low = _submit(c, tt)
        worker = Worker(cluster.urls, {tt: handler}, concurrency=10, reserve={"low": 0.1},
                        wait_s=2, timeout_s=60)
        try:
            with running(worker):
                wait_until(lambda: _states(c, low) == ["completed"] * LOW, WAIT_S,
                           "the low tasks completed through the reserved slot")
                waiting = _states(c, critical)
                assert waiting.count("pending") > 0, waiting     # the flood is still there
                assert "completed" not in waiting, waiting
                for tid in low:
                    assert c.get(tid)["worker_id"].endswith("/low")
                gate.set()
                wait_until(lambda: _states(c, critical) == ["completed"] * FLOOD, WAIT_S,
                           "the critical flood drained")
        finally:
            gate.set()


def test_without_a_reserve_low_tasks_wait_for_the_critical_flood(cluster):
    tt = f"noreserve-{uuid.uuid4().hex[:8]}"
    with Client(cluster.urls, timeout_s=60) as c:
        critical, low = _submit(c, tt)
        worker = Worker(cluster.urls, {tt: lambda payload, ctx: payload["tier"]},
                        concurrency=10, wait_s=2, timeout_s=60)
        with running(worker):
            wait_until(lambda: _states(c, critical + low) == ["completed"] * (FLOOD + LOW),
                       WAIT_S, "every task completed")
        tokens = {tid: c.get(tid)["fencing_token"] for tid in critical + low}
    # fencing tokens are issued in claim order: every low task was claimed after every
    # critical one (most urgent first), none while the flood was pending
    assert min(tokens[t] for t in low) > max(tokens[t] for t in critical), tokens
