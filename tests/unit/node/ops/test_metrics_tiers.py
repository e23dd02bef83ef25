"""The lateness histogram's `tier` label (DESIGN 5.1 "SLAs measured"): the claimed task's
tier at the claim, from its effective priority (aging included), with the cluster's table."""
from __future__ import annotations

import pytest

from tsched.node.services import Node
from tsched.node.ops.metrics import NodeMetrics
from tsched.statemachine import commands as c
from tsched.statemachine.limits import Limits
from tsched.statemachine.tiers import DEFAULT_TIERS, parse_tiers

from tests.unit.node.ops.test_metrics import T0, FakeReplica, claim, scrape, submit, value

AGING_MS = Limits().aging_interval_ms
COUNT = "tsched_scheduling_lateness_seconds_count"


def attached(replica: FakeReplica, tiers=DEFAULT_TIERS) -> NodeMetrics:
    m = NodeMetrics(clock_ms=lambda: T0, tiers=tiers)
    replica.add_apply_listener(m.attach(Node(node_id="n1", config=None, replica=replica,
                                             clock=None)))
    return m


def counts(m: NodeMetrics) -> dict[str, float]:
    return {dict(labels)["tier"]: n for labels, n in scrape(m)[COUNT].items()}


def test_each_claimed_task_is_counted_in_its_tier():
    replica = FakeReplica()
    m = attached(replica)
    assert counts(m) == {"critical": 0, "high": 0, "normal": 0, "low": 0, "batch": 0}
    for task_id, priority in (("p0", 0), ("p2", 2), ("p8", 8), ("p8b", 8), ("p10", 10)):
        submit(replica, task_id, T0, run_at_ms=T0, priority=priority)
    assert len(claim(replica, T0 + 2_000)) == 5
    assert counts(m) == {"critical": 1, "high": 1, "normal": 0, "low": 2, "batch": 1}
    s = scrape(m)
    assert value(s, "tsched_scheduling_lateness_seconds_sum", tier="low") == pytest.approx(4.0)
    assert value(s, "tsched_scheduling_lateness_seconds_bucket", tier="critical",
                 le="1.0") == 0                       # 2 s late: past the critical SLA
    assert value(s, "tsched_scheduling_lateness_seconds_bucket", tier="critical",
                 le="2.5") == 1


def test_a_task_that_waited_is_counted_in_the_tier_it_aged_into():
    replica = FakeReplica()
    m = attached(replica)
    due = T0 - 2 * AGING_MS - 1                       # two aging intervals: 8 -> 6
    submit(replica, "aged", due, run_at_ms=due, priority=8)
    submit(replica, "edge", T0 - AGING_MS + 1, run_at_ms=T0 - AGING_MS + 1, priority=7)
    claim(replica, T0)
    assert counts(m) == {"critical": 0, "high": 0, "normal": 1, "low": 1, "batch": 0}


def test_a_task_handed_out_before_it_is_due_keeps_its_own_priority():
    replica = FakeReplica()
    m = attached(replica)
    submit(replica, "soon", T0, run_at_ms=T0 + 500, priority=4)   # 4 is normal, 5 is too
    submit(replica, "edge", T0, run_at_ms=T0 + 500, priority=3)   # 3 is high, 4 is not
    res = replica.apply(c.Claim(request_id=replica.rid(), now_ms=T0, worker_id="w",
                                task_types=("t",), max_tasks=5, prefetch_ms=1000))[0]
    assert res.ok and len(res.value["tasks"]) == 2
    assert counts(m) == {"critical": 0, "high": 1, "normal": 1, "low": 0, "batch": 0}


def test_the_clusters_own_table_names_the_series():
    tiers = parse_tiers([{"name": "now", "min": 0, "max": 4, "sla_s": 2},
                         {"name": "later", "min": 5, "max": 10}])
    replica = FakeReplica()
    m = attached(replica, tiers)
    for task_id, priority in (("a", 1), ("b", 5), ("c", 9)):
        submit(replica, task_id, T0, run_at_ms=T0, priority=priority)
    claim(replica, T0 + 10)
    assert counts(m) == {"now": 1, "later": 2}


def test_the_aging_interval_is_the_replicas():
    replica = FakeReplica()
    replica.sm = type(replica.sm)(Limits(aging_interval_ms=1_000))
    m = attached(replica)
    assert m.aging_interval_ms == 1_000
    submit(replica, "x", T0 - 5_000, run_at_ms=T0 - 5_000, priority=9)   # 9 - 5 = 4
    claim(replica, T0)
    assert counts(m)["normal"] == 1
