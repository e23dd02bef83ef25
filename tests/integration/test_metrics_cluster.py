"""The metrics an operations team watches (DESIGN 14.4), scraped from every node of a real
3-node cluster after real work: run duration by task type, lease expirations, queue depth
and oldest-due age per tenant, dead letters."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.cluster import Cluster
from tests.harness.waits import wait_until

pytestmark = pytest.mark.slow


def scrape(c: Cluster, node: str) -> dict:
    """name -> {labels: value} of one node's /metrics."""
    r = c.client.get(c.url(node) + "/metrics")
    assert r.status_code == 200, r.text
    out: dict = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def submit(c: Cluster, node: str, task_type: str, tenant: str, n: int = 1, **extra) -> int:
    """The submit's applied_seq."""
    s, b = c.call(node, "POST", "/v1/tasks", {"tasks": [
        {"task_type": task_type, "tenant": tenant, **extra} for _ in range(n)]})
    assert s == 201, b
    return b["applied_seq"]


def claim(c: Cluster, node: str, task_type: str, n: int, **extra) -> list[dict]:
    s, b = c.call(node, "POST", "/v1/claims", {"worker_id": "w", "task_types": [task_type],
                                               "max_tasks": n, "wait_s": 5, **extra})
    assert s == 200 and len(b["tasks"]) == n, b
    return b["tasks"]


def test_operations_metrics_after_real_work(cluster: Cluster) -> None:
    leader = cluster.wait_leader()
    follower = cluster.followers(leader)[0]
    # Runs: three "report" tasks of tenant bank, completed.
    submit(cluster, follower, "report", "bank", 3)
    for task in claim(cluster, follower, "report", 3):
        s, b = cluster.call(follower, "POST", f"/v1/tasks/{task['task_id']}/complete",
                            {"fencing_token": task["fencing_token"]})
        assert s == 200, b
    # Dead letters: two "settle" tasks of bank fail for good.
    submit(cluster, leader, "settle", "bank", 2, max_retries=0)
    for task in claim(cluster, leader, "settle", 2):
        s, b = cluster.call(leader, "POST", f"/v1/tasks/{task['task_id']}/fail",
                            {"fencing_token": task["fencing_token"], "error": "partner down",
                             "retryable": False})
        assert s == 200 and b["state"] == "dead_letter", b
    # A lease that runs out: shop's "slow" task goes back to pending, due at once.
    submit(cluster, follower, "slow", "shop")
    claim(cluster, follower, "slow", 1, lease_s=1)
    # Queue depth: four tasks of shop nobody claims.
    idle = submit(cluster, follower, "idle", "shop", 4)
    # Acknowledged by the follower: each node's /metrics below is its own replica's, which
    # counting the expiry does not make hold this submit (it may come after the expiry).
    cluster.wait_applied(idle)

    def counted(node: str):
        m = scrape(cluster, node)
        return m.get("tsched_lease_expirations_total", {}).get(()) == 1 and m
    for node in cluster.ids:     # every replica counts the same events
        m = wait_until(lambda node=node: counted(node), timeout_s=20, what=f"{node} to count the expiry")
        run = {k: v for k, v in m["tsched_task_run_seconds_count"].items()}
        assert run == {(("task_type", "report"),): 3}, run
        assert m["tsched_task_run_seconds_sum"][(("task_type", "report"),)] > 0
        assert m["tsched_task_run_seconds_bucket"][(("le", "+Inf"), ("task_type", "report"))] == 3
        assert m["tsched_dead_lettered_tasks_total"][()] == 2
        depth = m["tsched_tenant_tasks"]
        assert depth[(("state", "pending"), ("tenant", "shop"))] == 5, depth
        assert depth[(("state", "pending"), ("tenant", "bank"))] == 0, depth
        ages = m["tsched_tenant_oldest_due_task_age_seconds"]
        assert set(ages) == {(("tenant", "shop"),)}, ages     # bank has nothing due
        assert ages[(("tenant", "shop"),)] > 0

    # The oldest due task keeps waiting: its age grows between scrapes.
    first = scrape(cluster, leader)["tsched_tenant_oldest_due_task_age_seconds"]
    wait_until(lambda: scrape(cluster, leader)["tsched_tenant_oldest_due_task_age_seconds"][
        (("tenant", "shop"),)] > first[(("tenant", "shop"),)] + 0.5, timeout_s=10,
        what="the age to grow")


def test_lateness_is_counted_by_tier_and_the_cluster_shows_its_tiers(cluster: Cluster) -> None:
    """A priority-0 and a priority-8 task claimed: every node counts one start in the
    critical tier and one in the low tier (DESIGN 5.1), and GET /v1/cluster has the table."""
    leader = cluster.wait_leader()
    follower = cluster.followers(leader)[0]
    submit(cluster, follower, "tiered", "bank", 1, priority=0)
    submit(cluster, follower, "tiered", "bank", 1, priority=8)
    claimed = claim(cluster, follower, "tiered", 2)
    assert sorted(t["priority"] for t in claimed) == [0, 8]
    count = "tsched_scheduling_lateness_seconds_count"

    def tiered(node: str):
        m = scrape(cluster, node)
        by_tier = {dict(k).get("tier"): v for k, v in m.get(count, {}).items()}
        return by_tier.get("critical") == 1 and by_tier.get("low") == 1 and by_tier
    for node in cluster.ids:     # every replica counts the same claims
        by_tier = wait_until(lambda node=node: tiered(node), timeout_s=20,
                             what=f"{node} to count the claims by tier")
        assert set(by_tier) == {"critical", "high", "normal", "low", "batch"}, by_tier
        assert by_tier["high"] == by_tier["batch"] == 0, by_tier
    status, body = cluster.call(follower, "GET", "/v1/cluster")
    assert status == 200, body
    assert body["tiers"] == [
        {"name": "critical", "priority_min": 0, "priority_max": 0, "sla_s": 1.0},
        {"name": "high", "priority_min": 1, "priority_max": 3, "sla_s": 5.0},
        {"name": "normal", "priority_min": 4, "priority_max": 6, "sla_s": 60.0},
        {"name": "low", "priority_min": 7, "priority_max": 9, "sla_s": 3600.0},
        {"name": "batch", "priority_min": 10, "priority_max": 10, "sla_s": None}]

    def graphed():   # the node's graphs: a p99 point for critical and low, none for high
        status, series = cluster.call(follower, "GET", "/v1/timeseries?step_s=60")
        assert status == 200, series
        by_tier = series["lateness_p99_ms_by_tier"]
        return any(v is not None for v in by_tier["critical"]) and \
            any(v is not None for v in by_tier["low"]) and by_tier
    by_tier = wait_until(graphed, timeout_s=20, what="the per-tier lateness in the graphs")
    assert list(by_tier) == [t["name"] for t in body["tiers"]]
    assert all(v is None for v in by_tier["high"]), by_tier
