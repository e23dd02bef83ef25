"""Weighted polling by tier over HTTP: POST /v1/claims `tier_weights` (DESIGN 5.1, 7)."""
from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter

import pytest

from tsched.node.api import claim_parsing
from tsched.node.api.openapi import components
from tsched.statemachine.tiers import Tier
from tests.api_support import Api, assert_error

CUSTOM = (Tier("urgent", 0, 4, 5.0), Tier("later", 5, 10, None))


@pytest.mark.parametrize("weights", [
    {"critical": 0}, {"critical": -1}, {"critical": 1001}, {"critical": 1.5},
    {"critical": "5"}, {"critical": True}, {"critical": None}, {"urgent": 5}, {}, [],
    ["critical"], "critical", 5, True, {"critical": 5, "nope": 1},
])
async def test_bad_weights_are_a_400_naming_tier_weights(api: Api, tt, weights):
    status, body = await api.call("POST", "/v1/claims", {
        "worker_id": "w", "task_types": [tt], "tier_weights": weights})
    assert_error(status, body, 400, "invalid_argument")
    assert body["error"]["details"]["field"] == "tier_weights"
    assert "tier_weights" in body["error"]["message"]


@pytest.mark.parametrize("extra", [{"priority_min": 0}, {"priority_max": 10},
                                   {"priority_min": 1, "priority_max": 3}])
async def test_weights_with_a_range_are_a_400(api: Api, tt, extra):
    status, body = await api.call("POST", "/v1/claims", {
        "worker_id": "w", "task_types": [tt], "tier_weights": {"critical": 1}, **extra})
    assert_error(status, body, 400, "invalid_argument")
    assert body["error"]["details"]["field"] == "tier_weights"


async def test_a_weighted_claim_splits_by_tier(api: Api, tt):
    for p in (0, 2, 5, 8):
        for _ in range(25):
            await api.submit(task_type=tt, priority=p)
    got = await api.claim([tt], max_tasks=20,
                          tier_weights={"low": 1, "critical": 10, "normal": 4, "high": 5})
    counts = Counter(t["priority"] for t in got)
    assert counts == {0: 10, 2: 5, 5: 4, 8: 1}


async def test_a_waiting_weighted_claim_wakes_for_its_tiers_only(api: Api, tt):
    waiting = asyncio.ensure_future(
        api.claim([tt], wait_s=20, tier_weights={"critical": 3, "low": 1}))
    await asyncio.sleep(0.05)
    await api.submit(task_type=tt, priority=5)   # normal: not named
    await asyncio.sleep(0.2)
    assert not waiting.done()
    mine = await api.submit(task_type=tt, priority=8)
    tasks = await asyncio.wait_for(waiting, 10)
    assert [t["task_id"] for t in tasks] == [mine["task_id"]]


async def test_names_come_from_the_clusters_tier_table(api: Api, tt):
    node = api.node
    default = node.config
    node.config = dataclasses.replace(default, tiers=CUSTOM)
    try:
        await api.submit(task_type=tt, priority=3)
        got = await api.claim([tt], max_tasks=5, tier_weights={"urgent": 2})
        assert [t["priority"] for t in got] == [3]
        status, body = await api.call("POST", "/v1/claims", {
            "worker_id": "w", "task_types": [tt], "tier_weights": {"critical": 1}})
        assert_error(status, body, 400, "invalid_argument")
        assert body["error"]["details"]["field"] == "tier_weights"
    finally:
        node.config = default


def test_weights_resolve_in_table_order() -> None:
    req = claim_parsing.claim({"worker_id": "w", "task_types": ["t"],
                               "tier_weights": {"later": 1, "urgent": 9}}, CUSTOM)
    assert req.tier_weights == ((0, 4, 9), (5, 10, 1))
    assert claim_parsing.claim({"worker_id": "w", "task_types": ["t"]}).tier_weights == ()


def test_openapi_documents_tier_weights() -> None:
    claim = components()["ClaimRequest"]["properties"]
    schema = claim["tier_weights"]
    assert schema["type"] == "object"
    assert schema["additionalProperties"] == {"type": "integer", "minimum": 1, "maximum": 1000}
