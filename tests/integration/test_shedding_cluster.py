"""Admission and load shedding on a real 3-node cluster (DESIGN 14.2): past `shed_above` of
`live_tasks_max`, low-priority submits get 429 `overloaded` with Retry-After while high
priorities go in; the decision is the state machine's (every node counts it in /metrics),
and the Client waits Retry-After and sends the same submit again."""
from __future__ import annotations

import threading

import httpx
import pytest

from tests.harness.cluster import running
from tests.harness.waits import wait_until
from tsched.client import Client, Overloaded
from tsched.statemachine.limits import API_LIMITS

pytestmark = pytest.mark.slow
LIVE_MAX = 20
LIMITS_TOML = f"\n[limits]\nlive_tasks_max = {LIVE_MAX}\nshed_above = 0.5\n"


@pytest.fixture
def small_cluster(tmp_path):
    yield from running(tmp_path, extra_toml=LIMITS_TOML)


def shed_count(cluster, node: str, tier: str = "") -> float:
    """Submits shed for their priority, in one tier or (by default) in every tier."""
    text = httpx.get(f"{cluster.url(node)}/metrics", timeout=10).text
    prefix = f'tsched_submits_shed_total{{reason="priority",tier="{tier}'
    lines = [x for x in text.splitlines() if x.startswith(prefix)]
    assert lines, "no shed counter in /metrics"
    return sum(float(x.split()[-1]) for x in lines)      # every tier


def test_low_priorities_are_shed_past_the_threshold_and_the_client_waits(small_cluster):
    cluster = small_cluster
    leader = cluster.wait_leader()
    with Client(cluster.urls, timeout_s=30) as client:
        for i in range(LIVE_MAX // 2):                       # up to the threshold: admitted
            client.submit("report", {"n": i}, priority=9)

        status, body = cluster.call(leader, "POST", "/v1/tasks",
                                    {"task_type": "report", "priority": 6})
        assert status == 429 and body["error"]["code"] == "overloaded", body
        assert body["error"]["details"]["reason"] == "priority"
        resp = httpx.post(f"{cluster.url(leader)}/v1/tasks", timeout=10,
                          json={"task_type": "report", "priority": 9})
        assert resp.status_code == 429
        assert resp.headers["Retry-After"] == str(API_LIMITS.shed_retry_after_s)

        urgent = client.submit("settle", priority=5)          # not shed
        assert urgent["state"] == "pending"

        # the decision is replicated: every node counted the same two sheds
        cluster.wait_applied(urgent["applied_seq"])
        assert [shed_count(cluster, n) for n in cluster.ids] == [2.0] * 3
        # counted by the shed task's tier (DESIGN 5.1): priority 6 is normal, 9 is low
        assert shed_count(cluster, leader, "normal") == shed_count(cluster, leader, "low") == 1

        # a client with no time to wait raises Overloaded with the cluster's advice
        with Client(cluster.urls, timeout_s=2) as hurried:
            with pytest.raises(Overloaded) as err:
                hurried.submit("report", priority=8)
        assert err.value.retry_after_s == API_LIMITS.shed_retry_after_s

        # a patient client waits Retry-After and sends the same submit again: it goes in
        # once a worker has drained the queue below the threshold
        answer: dict = {}
        waiting = threading.Thread(
            target=lambda: answer.update(client.submit("report", {"late": True}, priority=9)))
        waiting.start()
        wait_until(lambda: shed_count(cluster, leader) == 4.0, 30, "the patient submit shed once")
        done = 0
        while done < 3:                                       # 11 live -> 8: below 10
            for task in client.claim("w1", ["report"], max_tasks=3 - done, wait_s=5):
                client.complete(task["task_id"], task["fencing_token"], {"ok": True})
                done += 1
        waiting.join(30)
        assert not waiting.is_alive() and answer["state"] == "pending"
        assert answer["payload"] == {"late": True}
