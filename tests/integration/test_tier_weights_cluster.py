"""Weighted polling by tier on a real 3-node cluster and through a 3-shard router
(DESIGN 5.1, 7, 13)."""
from __future__ import annotations

import threading
import uuid
from collections import Counter

import pytest

from tsched.client import Client
from tsched.node.topology import shard_of_tenant

from tests.harness.cluster import Cluster

pytestmark = pytest.mark.slow

TIER_PRIORITY = {"critical": 0, "high": 2, "normal": 5, "low": 8}
TIER_OF = {p: name for name, p in TIER_PRIORITY.items()}
WEIGHTS = {"critical": 50, "high": 30, "normal": 15, "low": 5}


def fill(c: Client, tt: str, per_tier: int, tenants=("default",)) -> None:
    items = [{"task_type": tt, "priority": p, "tenant": tenants[i % len(tenants)]}
             for p in TIER_PRIORITY.values() for i in range(per_tier)]
    for i in range(0, len(items), 200):
        c.submit_many(items[i:i + 200])


def split(tasks: list[dict]) -> Counter:
    return Counter(TIER_OF[t["priority"]] for t in tasks)


def test_a_claim_of_100_splits_50_30_15_5(cluster):
    tt = f"wt-{uuid.uuid4().hex[:8]}"
    with Client(cluster.urls, timeout_s=30) as c:
        fill(c, tt, 120)
        got = c.claim("w-weights", [tt], max_tasks=100, tier_weights=WEIGHTS)
        assert len(got) == 100 and len({t["task_id"] for t in got}) == 100
        counts = split(got)
        for name, share in WEIGHTS.items():
            assert abs(counts[name] - share) <= 2, counts
        # a few smaller claims keep the proportions (the credits start at 0 in each)
        more: list[dict] = []
        for _ in range(4):
            more += c.claim("w-weights", [tt], max_tasks=25, tier_weights=WEIGHTS)
        counts = split(more)
        assert len(more) == 100
        for name, share in WEIGHTS.items():
            assert abs(counts[name] - share) <= 4, counts


def test_an_empty_tier_gives_its_share_away_and_others_are_not_taken(cluster):
    tt = f"wte-{uuid.uuid4().hex[:8]}"
    with Client(cluster.urls, timeout_s=30) as c:
        c.submit_many([{"task_type": tt, "priority": 0} for _ in range(150)]
                      + [{"task_type": tt, "priority": 8} for _ in range(150)]
                      + [{"task_type": tt, "priority": 10} for _ in range(20)])
        got = c.claim("w-weights", [tt], max_tasks=100, tier_weights=WEIGHTS)
        counts = split(got)
        # high and normal are empty: critical and low split 50:5 of 100
        assert set(counts) == {"critical", "low"} and len(got) == 100
        assert abs(counts["critical"] - 100 * 50 / 55) <= 2, counts
        assert len(c.claim("w-weights", [tt], max_tasks=100, priorities=(10, 10))) == 20


def test_a_waiting_weighted_claim_wakes_for_its_tiers(cluster):
    tt = f"wtw-{uuid.uuid4().hex[:8]}"
    got: list[list[dict]] = []
    with Client(cluster.urls, timeout_s=60) as c:
        other = c.submit(tt, {}, priority=5)["task_id"]     # normal: not named
        waiter = threading.Thread(target=lambda: got.append(c.claim(
            "w-wait", [tt], max_tasks=5, wait_s=30, tier_weights={"critical": 2, "low": 1})))
        waiter.start()
        mine = c.submit(tt, {}, priority=8)["task_id"]
        waiter.join(60)
        assert not waiter.is_alive()
        assert [t["task_id"] for t in got[0]] == [mine]
        assert c.get(other)["state"] == "pending"


def refused(cluster: Cluster, node_id: str, extra: dict) -> None:
    """A claim with `extra` sent as is (the client would refuse some before sending)."""
    status, body = cluster.call(node_id, "POST", "/v1/claims",
                                {"worker_id": "w", "task_types": ["x"], **extra})
    assert status == 400 and body["error"]["code"] == "invalid_argument", body
    assert body["error"]["details"]["field"] == "tier_weights", body


def test_bad_weights_are_refused_by_every_node(cluster):
    for node_id in cluster.ids:     # followers refuse before forwarding, leaders alike
        for extra in ({"tier_weights": {"nope": 1}}, {"tier_weights": {"low": 1001}},
                      {"tier_weights": {"low": 1}, "priority_max": 3},
                      {"tier_weights": []}):
            refused(cluster, node_id, extra)


def test_a_router_passes_the_weights_to_every_shard(tmp_path):
    tenants = [f"team-{i}" for i in range(12)]
    assert {shard_of_tenant(t, 3) for t in tenants} == {0, 1, 2}
    with Cluster(tmp_path, shards=3) as cluster:
        cluster.start()
        cluster.wait_shard_leaders()
        with Client(cluster.urls, timeout_s=30) as c:
            made = c.submit_many([{"task_type": "sh", "tenant": t, "priority": p}
                                  for t in tenants for p in (0, 5, 8)])
            named = {t["task_id"] for t in made if c.get(t["task_id"])["priority"] != 5}
            got: list[dict] = []
            while batch := c.claim("w-sh", ["sh"], max_tasks=5,
                                   tier_weights={"critical": 3, "low": 1}):
                got += batch
            assert {t["task_id"] for t in got} == named and len(got) == len(named)
            assert {int(t["task_id"][:2], 16) for t in got} == {0, 1, 2}
            waiting = c.claim("w-sh", ["sh"], max_tasks=5, wait_s=0.5,
                              tier_weights={"batch": 1})
            assert waiting == []
        for node_id in cluster.ids:
            refused(cluster, node_id, {"tier_weights": {"critical": 0}})
