"""Tenants, cluster status and leadership transfer on a single-node cluster."""
from __future__ import annotations

import logging
import uuid

import pytest

from tests.api_support import Api, assert_error


async def test_tenant_settings_round_trip_with_counts(api: Api):
    name = "ten-" + uuid.uuid4().hex[:6]
    status, t = await api.call("PUT", f"/v1/tenants/{name}", {"max_running": 2, "weight": 3})
    assert status == 200 and t["max_running"] == 2 and t["weight"] == 3
    await api.submit(task_type="tenant-" + name, tenant=name)
    status, got = await api.call("GET", f"/v1/tenants/{name}?min_seq={t['applied_seq']}")
    assert status == 200 and got["pending"] == 1 and got["running"] == 0
    status, all_ = await api.call("GET", "/v1/tenants")
    assert status == 200 and name in [x["tenant"] for x in all_["tenants"]]
    status, t = await api.call("PUT", f"/v1/tenants/{name}", {"weight": 5})
    assert t["max_running"] == 2 and t["weight"] == 5


async def test_tenant_cap_holds_back_claims(api: Api):
    name = "cap-" + uuid.uuid4().hex[:6]
    tt = "captype-" + name
    await api.call("PUT", f"/v1/tenants/{name}", {"max_running": 1})
    for _ in range(2):
        await api.submit(task_type=tt, tenant=name)
    first = await api.claim([tt], max_tasks=2)
    assert len(first) == 1
    proposed = api.node.claims.stats.proposed
    assert await api.claim([tt], wait_s=0.5) == []
    # A capped tenant's work must not make the dispatcher propose Claims in a loop.
    assert api.node.claims.stats.proposed - proposed <= 1


@pytest.mark.parametrize("path, body", [
    ("/v1/tenants/acme", {"weight": 0}),
    ("/v1/tenants/acme", {"weight": 1001}),
    ("/v1/tenants/acme", {"max_running": -1}),
    ("/v1/tenants/acme", {"max_running": "3"}),
    ("/v1/tenants/acme", {"cap": 3}),
    ("/v1/tenants/a%20b", {"weight": 1}),
])
async def test_bad_tenant_settings_are_refused(api: Api, path, body):
    status, got = await api.call("PUT", path, body)
    assert_error(status, got, 400, "invalid_argument")


async def test_unknown_tenant_is_not_found(api: Api):
    status, got = await api.call("GET", "/v1/tenants/nobody-" + uuid.uuid4().hex[:6])
    assert_error(status, got, 404, "not_found")


async def test_cluster_status_of_a_single_node(api: Api):
    status, c = await api.call("GET", "/v1/cluster")
    assert status == 200 and c["leader"] == "n1" and c["term"] >= 1
    (n,) = c["nodes"]
    assert n["id"] == "n1" and n["role"] == "leader" and n["reachable"] is True
    assert len(n["digest"]) == 64 and n["applied_seq"] >= 1 and n["commit_index"] >= 1
    assert set(n) >= {"id", "http", "raft", "role", "commit_index", "applied_seq", "digest",
                      "reachable"}
    # the priority tiers (DESIGN 5.1), the default table here
    assert [t["name"] for t in c["tiers"]] == ["critical", "high", "normal", "low", "batch"]
    assert c["tiers"][0] == {"name": "critical", "priority_min": 0, "priority_max": 0,
                             "sla_s": 1.0}
    assert c["tiers"][-1]["sla_s"] is None


async def test_transfer_leadership_validates_its_target(api: Api):
    status, got = await api.call("POST", "/v1/cluster/transfer-leadership", {"to": "n9"})
    assert_error(status, got, 400, "invalid_argument")
    status, got = await api.call("POST", "/v1/cluster/transfer-leadership", {"x": 1})
    assert_error(status, got, 400, "invalid_argument")
    status, got = await api.call("POST", "/v1/cluster/transfer-leadership", {"to": "n1"})
    assert status == 202


async def test_a_transfer_in_a_cluster_of_one_is_recorded_and_not_waited_for(api: Api,
                                                                           caplog):
    """No other node can lead: the transfer is accepted without asking Raft for one (which
    would wait out its 5 s and log that it was not done)."""
    with caplog.at_level(logging.WARNING):
        status, got = await api.call("POST", "/v1/cluster/transfer-leadership", {})
    assert status == 202 and got["from"] == "n1"
    assert "transfer_not_done" not in caplog.text
    status, out = await api.call("GET", "/v1/audit?action=cluster.transfer_leadership")
    assert status == 200 and out["entries"]
