"""A claim, and a router's head read, see every write acknowledged before they were sent,
on a real cluster.

A leader may tell its followers of a commit before it applies the entry (a tick applies a
bounded slice), so a follower can acknowledge a submit the leader has not applied yet. The
`stall_leader_apply` failpoint holds the leader in that state for as long as a test needs:
the submit, acknowledged by a follower, is committed and applied there but not at the
leader. A claim with `wait_s` 0, or a head read, sent then must not answer "nothing": it
waits at the leader (`tsched_raft_apply_catch_up_waits`) until the leader has applied
what it knew committed, and then answers with the task."""
from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness.cluster import Cluster, running
from tests.harness.waits import wait_until

pytestmark = pytest.mark.slow
PRIORITY = 3


@pytest.fixture(scope="module")
def held(tmp_path_factory) -> Iterator[tuple[Cluster, Path]]:
    """A cluster whose leader applies nothing while the stall file exists."""
    record = tmp_path_factory.mktemp("ryw-record") / "record"
    env = {"TSCHED_FAILPOINTS": "stall_leader_apply", "TSCHED_FAILPOINTS_RECORD": str(record)}
    for c in running(tmp_path_factory.mktemp("ryw"), env=env):
        yield c, Path(f"{record}.apply_stall")


def catch_up_waits(c: Cluster, node: str) -> float:
    r = c.client.get(c.url(node) + "/metrics")
    assert r.status_code == 200, r.text
    line = next(x for x in r.text.splitlines()
                if x.startswith("tsched_raft_apply_catch_up_waits "))
    return float(line.split()[1])


def acknowledged_while_held(c: Cluster, stall: Path) -> tuple[str, str, dict]:
    """(leader, task type, the task) submitted at a follower and acknowledged there, with
    the leader's apply held (the stall file left in place)."""
    leader = c.wait_leader()
    follower = c.followers(leader)[0]
    tt = "ryw-" + uuid.uuid4().hex[:6]
    stall.write_text("held")
    s, b = c.call(follower, "POST", "/v1/tasks", {"task_type": tt, "priority": PRIORITY})
    assert s == 201, b
    # Acknowledged: the follower applied it. The leader, held, has not.
    assert c.applied_seq(follower) >= b["applied_seq"] > c.applied_seq(leader)
    return leader, tt, b


def answer_once_released(c: Cluster, leader: str, stall: Path,
                         send: Callable[[], tuple[int, dict]]) -> tuple[int, dict]:
    """`send()` on a thread; once it waits at the leader for its apply (or has answered),
    the stall is lifted; its answer."""
    answers: list[tuple[int, dict]] = []
    sender = threading.Thread(target=lambda: answers.append(send()))
    sender.start()
    try:
        wait_until(lambda: answers or catch_up_waits(c, leader) >= 1, 15,
                   "the request answered, or waiting at the leader for its apply")
    finally:
        stall.unlink()
        sender.join(30)
    assert answers, "not answered once the leader applied"
    return answers[0]


def test_a_claim_takes_a_task_a_follower_acknowledged_before_the_leader_applied_it(held):
    c, stall = held
    leader, tt, task = acknowledged_while_held(c, stall)
    status, body = answer_once_released(c, leader, stall, lambda: c.call(
        leader, "POST", "/v1/claims", {"worker_id": "w-ryw", "task_types": [tt],
                                       "max_tasks": 1, "wait_s": 0}))
    assert status == 200, body
    assert [t["task_id"] for t in body["tasks"]] == [task["task_id"]]


def test_a_head_read_counts_a_task_a_follower_acknowledged_before_the_leader_applied_it(held):
    c, stall = held
    leader, tt, _ = acknowledged_while_held(c, stall)
    status, body = answer_once_released(c, leader, stall, lambda: c.call(
        leader, "POST", "/v1/claims", {"worker_id": "w-ryw", "task_types": [tt],
                                       "max_tasks": 1, "wait_s": 0},
        headers={"X-Tsched-Claim-Head": "1"}))
    assert status == 200, body
    assert body["tasks"] == [] and body["head"] == PRIORITY
