"""A claim sees every write acknowledged before it was sent, on a real cluster.

A leader may tell its followers of a commit before it applies the entry (a tick applies a
bounded slice), so a follower can acknowledge a submit the leader has not applied yet. The
`stall_leader_apply` failpoint holds the leader in that state for as long as the test
needs: the submit, acknowledged by a follower, is committed and applied there but not at
the leader. A claim with `wait_s` 0 sent then must not answer "nothing to claim": it waits
at the leader until the leader has applied what it knew committed, and takes the task."""
from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from tests.harness.cluster import Cluster
from tests.harness.waits import wait_until

pytestmark = pytest.mark.slow


def applied_seq(c: Cluster, node: str) -> int:
    s, b = c.call(node, "GET", "/v1/cluster")
    assert s == 200, b
    return next(n["applied_seq"] for n in b["nodes"] if n["id"] == node)


def waiting_claims(c: Cluster, node: str) -> float:
    r = c.client.get(c.url(node) + "/metrics")
    assert r.status_code == 200, r.text
    line = next(x for x in r.text.splitlines() if x.startswith("tsched_waiting_claims "))
    return float(line.split()[1])


def test_a_claim_takes_a_task_a_follower_acknowledged_before_the_leader_applied_it(tmp_path):
    record = tmp_path / "record"
    stall = Path(f"{record}.apply_stall")
    env = {"TSCHED_FAILPOINTS": "stall_leader_apply", "TSCHED_FAILPOINTS_RECORD": str(record)}
    tt = "ryw-" + uuid.uuid4().hex[:6]
    with Cluster(tmp_path, size=3, env=env) as c:
        c.start()
        leader = c.wait_leader()
        follower = c.followers(leader)[0]
        stall.write_text("held")
        s, b = c.call(follower, "POST", "/v1/tasks", {"task_type": tt})
        assert s == 201, b
        # Acknowledged: the follower applied it. The leader, held, has not.
        assert applied_seq(c, follower) >= b["applied_seq"] > applied_seq(c, leader)

        answers: list[tuple[int, dict]] = []
        claimer = threading.Thread(target=lambda: answers.append(c.call(
            leader, "POST", "/v1/claims", {"worker_id": "w-ryw", "task_types": [tt],
                                           "max_tasks": 1, "wait_s": 0})))
        claimer.start()
        try:
            wait_until(lambda: answers or waiting_claims(c, leader) >= 1, 15,
                       "the claim answered, or waiting at the leader")
        finally:
            stall.unlink()
            claimer.join(30)
        assert answers, "the claim was not answered once the leader applied"
        status, body = answers[0]
        assert status == 200, body
        assert [t["task_id"] for t in body["tasks"]] == [b["task_id"]]
