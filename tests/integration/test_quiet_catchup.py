"""A follower that comes back from a stall disturbs nobody (pre-vote), on a real cluster.

A follower whose process was held (SIGSTOP) past the election timeout wakes up with its
election deadline long gone. Without pre-vote it campaigns at once with a higher term and
the leader, hearing of that term, steps down: an election for nothing."""
from __future__ import annotations

import time

import pytest

from tests.harness.cluster import Cluster, running

pytestmark = pytest.mark.slow

HOLD_PAST_TIMEOUT_S = 4.0     # > raft_max_timeout_s (2.5 s)


@pytest.fixture
def fresh_cluster(tmp_path):
    """tsnode's own election timeouts: this module's tests are about what happens within
    one (the conftest's cluster has the harness's short ones)."""
    yield from running(tmp_path, fast_raft=False)


def submit(c: Cluster, node: str, tt: str) -> int:
    status, body = c.call(node, "POST", "/v1/tasks", {"task_type": tt})
    assert status == 201, body
    return body["applied_seq"]


def test_a_follower_held_past_the_election_timeout_starts_no_election(fresh_cluster: Cluster):
    c = fresh_cluster
    leader = c.wait_leader()
    term = c.self_status(leader)["term"]
    follower = c.followers(leader)[0]
    c.pause(follower)
    held_until = time.monotonic() + HOLD_PAST_TIMEOUT_S
    while time.monotonic() < held_until:     # the cluster keeps working meanwhile
        submit(c, leader, "while-held")
    c.resume(follower)
    seq = submit(c, leader, "after-resume")
    c.wait_applied(seq, [follower], timeout_s=30)
    seq = submit(c, leader, "after-catch-up")   # a write through the same leader and term
    c.wait_applied(seq, timeout_s=30)
    status = {i: c.self_status(i) for i in c.ids}
    assert {s["leader"] for s in status.values()} == {leader}, status
    assert {s["term"] for s in status.values()} == {term}, status
