"""A replica that applies differently is found: with the `diverge_apply` failpoint on one
node (its state machine refuses every completion), `GET /v1/cluster` shows equal digests
for the replicas at one applied seq until a completion is applied, and from then on the
diverging node's digest differs from its peers' at the same seq."""
from __future__ import annotations

import time

import pytest

from tests.harness.cluster import Cluster

pytestmark = pytest.mark.slow


def digests_at_one_seq(c: Cluster, node: str, timeout_s: float = 20) -> dict[str, str]:
    """Every node's digest, from one `GET /v1/cluster` where all report the same seq."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, view = c.call(node, "GET", "/v1/cluster")
        assert status == 200, view
        seqs = {n["applied_seq"] for n in view["nodes"]}
        if len(seqs) == 1 and None not in seqs:
            return {n["id"]: n["digest"] for n in view["nodes"]}
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


def test_a_replica_that_applies_differently_shows_a_different_digest(tmp_path):
    with Cluster(tmp_path, node_env={"n3": {"TSCHED_FAILPOINTS": "diverge_apply"}}) as c:
        c.start()
        leader = c.wait_leader()
        status, task = c.call(leader, "POST", "/v1/tasks", {"task_type": "div"})
        assert status == 201, task
        before = digests_at_one_seq(c, leader)
        assert len(set(before.values())) == 1, before      # equal so far: no completion yet

        status, claimed = c.call(leader, "POST", "/v1/claims", {
            "worker_id": "w", "task_types": ["div"], "max_tasks": 1, "lease_s": 60})
        assert status == 200 and len(claimed["tasks"]) == 1, claimed
        got = claimed["tasks"][0]
        c.call(leader, "POST", f"/v1/tasks/{got['task_id']}/complete",
               {"fencing_token": got["fencing_token"], "result": 1})

        after = digests_at_one_seq(c, leader)
        assert after["n1"] == after["n2"] != after["n3"], after
        assert not c.exited_unexpectedly()
