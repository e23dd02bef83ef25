"""Claims by priority range and RetryLater on a real 3-node cluster (DESIGN 5, 7, 9)."""
from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest

from tsched.client import Client, RetryLater, Worker
from tsched.node.topology import shard_of_tenant

from tests.harness.cluster import Cluster
from tests.harness.waits import wait_until

pytestmark = pytest.mark.slow


def when(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_a_range_claim_takes_only_its_range(cluster):
    tt = f"rng-{uuid.uuid4().hex[:8]}"
    with Client(cluster.urls) as c:
        ids = {p: c.submit(tt, {"p": p}, priority=p)["task_id"] for p in (0, 2, 5, 9, 10)}
        got = c.claim("w-range", [tt], max_tasks=10, priorities=(7, 10))
        assert {t["task_id"] for t in got} == {ids[9], ids[10]}
        got = c.claim("w-range", [tt], max_tasks=10, priorities=(3, 4))
        assert got == []
        got = c.claim("w-range", [tt], max_tasks=10, priorities=(0, 3))
        assert [t["task_id"] for t in got] == [ids[0], ids[2]]
        assert c.get(ids[5])["state"] == "pending"


def test_a_worker_with_a_range_runs_only_its_range(cluster):
    tt = f"wrk-{uuid.uuid4().hex[:8]}"
    ran: list[int] = []
    worker = Worker(cluster.urls, {tt: lambda payload, ctx: ran.append(payload["p"])},
                    concurrency=2, priorities=(0, 3), wait_s=2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        with Client(cluster.urls) as c:
            ids = {p: c.submit(tt, {"p": p}, priority=p)["task_id"] for p in (1, 3, 4, 8)}
            wait_until(lambda: all(c.get(ids[p])["state"] == "completed" for p in (1, 3)),
                       timeout_s=30, what="the in-range tasks completed")
            assert c.get(ids[4])["state"] == "pending" and c.get(ids[8])["state"] == "pending"
            assert sorted(ran) == [1, 3]
    finally:
        worker.stop()
        thread.join(30)


def test_retry_later_sets_the_next_attempt_n_seconds_out(cluster):
    tt = f"later-{uuid.uuid4().hex[:8]}"
    calls: list[int] = []

    def handler(payload, ctx):
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RetryLater(after_s=3)
        return {"ok": True}

    worker = Worker(cluster.urls, {tt: handler}, concurrency=1, wait_s=2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        with Client(cluster.urls) as c:
            tid = c.submit(tt, {}, max_retries=2,
                           retry={"backoff": "fixed", "base_s": 60, "max_s": 60})["task_id"]
            task = wait_until(lambda: (t := c.get(tid))["status"] == "retrying" and t,
                              timeout_s=30, what="the first attempt failed with RetryLater")
            failed_at = when(task["attempts"][0]["ended_at"])
            assert task["next_retry_at"] == task["run_at"]
            assert when(task["next_retry_at"]) - failed_at == dt.timedelta(seconds=3)
            done = wait_until(lambda: (t := c.get(tid))["state"] == "completed" and t,
                              timeout_s=30, what="the second attempt ran")
            assert when(done["attempts"][1]["started_at"]) >= when(task["next_retry_at"])
            assert done["attempt"] == 2 and calls == [1, 2]
    finally:
        worker.stop()
        thread.join(30)


def test_a_router_passes_the_range_to_every_shard(tmp_path):
    tenants = [f"team-{i}" for i in range(12)]
    assert {shard_of_tenant(t, 3) for t in tenants} == {0, 1, 2}
    with Cluster(tmp_path, shards=3) as cluster:
        cluster.start()
        cluster.wait_shard_leaders()
        with Client(cluster.urls, timeout_s=30) as c:
            made = c.submit_many([{"task_type": "sh", "tenant": t, "priority": p}
                                  for t in tenants for p in (1, 8)])
            low = {t["task_id"] for t in made if c.get(t["task_id"])["priority"] == 8}
            got: list[dict] = []
            while batch := c.claim("w-sh", ["sh"], max_tasks=5, priorities=(7, 10)):
                got += batch
            assert {t["task_id"] for t in got} == low
            assert {int(t["task_id"][:2], 16) for t in got} == {0, 1, 2}
            waiting = c.claim("w-sh", ["sh"], max_tasks=5, wait_s=0.5, priorities=(9, 10))
            assert waiting == []
