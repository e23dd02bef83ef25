"""Across shards a claim takes the most urgent task of all shards first (DESIGN.md 5.1,
13): with normal work on two shards and one critical task on the third, a one-task claim
at any node gets the critical task, whichever shard the rotation would have asked first."""
from __future__ import annotations

import pytest

from tsched.node.topology import shard_of_tenant

from tests.harness.cluster import Cluster, running

pytestmark = pytest.mark.slow
SHARDS = 3
TENANTS = [f"team-{i}" for i in range(12)]
NORMAL, CRITICAL = 5, 0


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    yield from running(tmp_path_factory.mktemp("heads"), shards=SHARDS)


def tenant_of(shard: int) -> str:
    return next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == shard)


def submit(c: Cluster, node: str, tasks: list[dict]) -> list[dict]:
    status, body = c.call(node, "POST", "/v1/tasks", {"tasks": tasks})
    assert status == 201, body
    return body["tasks"]


def complete(c: Cluster, node: str, task: dict) -> None:
    status, body = c.call(node, "POST", f"/v1/tasks/{task['task_id']}/complete",
                          {"fencing_token": task["fencing_token"], "result": None})
    assert status == 200, body


def test_one_claim_takes_the_critical_task_of_the_third_shard_first(sharded):
    """Six rounds: the critical task lands on each shard twice, after five more normal
    tasks on each of the two others (the normal ones of earlier rounds stay pending), and
    a claim of one task through each node in turn gets it, never a normal one."""
    tt = "heads"
    for rnd in range(6):
        hot = rnd % SHARDS
        normal = [{"task_type": tt, "tenant": tenant_of(s), "priority": NORMAL,
                   "payload": {"round": rnd}}
                  for s in range(SHARDS) if s != hot for _ in range(5)]
        submit(sharded, sharded.ids[(rnd + 1) % 3], normal)
        [crit] = submit(sharded, sharded.ids[(rnd + 2) % 3], [
            {"task_type": tt, "tenant": tenant_of(hot), "priority": CRITICAL,
             "payload": {"round": rnd}}])
        node = sharded.ids[rnd % 3]
        status, body = sharded.call(node, "POST", "/v1/claims", {
            "worker_id": f"w-{rnd}", "task_types": [tt], "max_tasks": 1, "wait_s": 0})
        assert status == 200, body
        got = body["tasks"]
        assert [t["task_id"] for t in got] == [crit["task_id"]], (rnd, got)
        assert got[0]["shard"] == hot and got[0]["priority"] == CRITICAL
        complete(sharded, node, got[0])


def test_a_range_claim_takes_the_most_urgent_in_its_range_across_shards(sharded):
    """The caller's range holds: asked for 4..10, a claim skips critical work wherever it
    is and takes the most urgent task in range (priority 4 on one shard, before 6 and 8 on
    the others), then the next ones in order of urgency."""
    tt = "heads-range"
    submit(sharded, "n1", [
        {"task_type": tt, "tenant": tenant_of(0), "priority": 0},
        {"task_type": tt, "tenant": tenant_of(0), "priority": 8},
        {"task_type": tt, "tenant": tenant_of(1), "priority": 6},
        {"task_type": tt, "tenant": tenant_of(2), "priority": 4},
        {"task_type": tt, "tenant": tenant_of(2), "priority": 9}])
    claim = {"worker_id": "w-range", "task_types": [tt], "max_tasks": 1, "wait_s": 0,
             "priority_min": 4}
    taken = []
    for i in range(4):
        status, body = sharded.call(sharded.ids[i % 3], "POST", "/v1/claims", claim)
        assert status == 200, body
        assert len(body["tasks"]) == 1, (i, body)
        taken.append((body["tasks"][0]["shard"], body["tasks"][0]["priority"]))
        complete(sharded, "n2", body["tasks"][0])
    assert taken == [(2, 4), (1, 6), (0, 8), (2, 9)]
