"""In-flight claims survive a failover, on a real cluster: the leader commits a Claim and
dies before answering (failpoint `crash_after_claim`); the client asks again with the same
Idempotency-Key at another node, and the next leader answers with the same tasks from its
request table instead of leaving them leased to nobody until their lease runs out."""
from __future__ import annotations

import uuid

import pytest

from tsched.client import Client
from tests.harness.cluster import Cluster

pytestmark = pytest.mark.slow

LEASE_S = 120          # far beyond the test: only a replayed Claim can hand the tasks out
WAIT_S = 10


def test_a_claim_whose_answer_died_with_the_leader_is_answered_by_the_next(tmp_path):
    record = tmp_path / "crash-record"
    env = {"TSCHED_FAILPOINTS": "crash_after_claim", "TSCHED_FAILPOINTS_RECORD": str(record)}
    with Cluster(tmp_path, size=3, env=env) as c:
        c.start()
        leader = c.wait_leader()
        tt = "lost-" + uuid.uuid4().hex[:6]
        with Client(c.url(leader)) as submitter:
            ids = sorted(submitter.submit(tt)["task_id"] for _ in range(3))
        urls = [c.url(leader)] + [c.url(f) for f in c.followers(leader)]
        with Client(urls) as client:
            got = client.claim("w-lost", [tt], max_tasks=3, wait_s=WAIT_S, lease_s=LEASE_S)
        assert record.read_text().strip(), "the leader did not crash after the Claim"
        assert not c.alive(leader)
        assert sorted(t["task_id"] for t in got) == ids
        assert all(t["worker_id"] == "w-lost" and t["state"] == "running" for t in got)
        new = c.wait_leader(exclude=[leader])
        with Client(c.url(new)) as reader:
            for t in got:   # the fencing token handed out is the lease the task holds
                assert reader.get(t["task_id"])["fencing_token"] == t["fencing_token"]
