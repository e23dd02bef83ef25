"""Client.claim / AsyncClient.claim `tier_weights` (DESIGN 5.1): sent as the node reads it,
refused before sending when the node would refuse it."""
from __future__ import annotations

import pytest

from tsched.client import AsyncClient, Client

try:
    from client_support import FakeNode
except ImportError:  # collected as a package
    from tests.unit.client.client_support import FakeNode

WEIGHTS = {"critical": 50, "high": 30, "normal": 15, "low": 5}


@pytest.fixture
def node():
    made = FakeNode()
    made.json("POST", "/v1/claims", 200, {"tasks": [], "completions": []})
    yield made
    made.close()


def test_sync_claims_send_the_weights(node):
    with Client(node.url) as c:
        assert c.claim("w", ["t"], max_tasks=100, tier_weights=WEIGHTS) == []
        c.claim_and_complete("w", ["t"], [], tier_weights={"batch": 1})
        c.claim("w", ["t"])
    sent = [s.body for s in node.requests("POST", "/v1/claims")]
    assert sent[0]["tier_weights"] == WEIGHTS and "priority_min" not in sent[0]
    assert sent[1]["tier_weights"] == {"batch": 1}
    assert "tier_weights" not in sent[2]


async def test_async_claims_send_the_weights(node):
    async with AsyncClient(node.url) as c:
        assert await c.claim("w", ["t"], tier_weights={"low": 1000}) == []
    assert node.requests("POST", "/v1/claims")[0].body["tier_weights"] == {"low": 1000}


@pytest.mark.parametrize("weights", [
    {}, {"critical": 0}, {"critical": 1001}, {"critical": -3}, {"critical": 1.5},
    {"critical": True}, {"critical": "5"}, {"Critical!": 1}, {1: 1}, ["critical"], "low", 5])
def test_bad_weights_raise_before_sending(node, weights):
    with Client(node.url) as c:
        with pytest.raises(ValueError, match="tier_weights"):
            c.claim("w", ["t"], tier_weights=weights)
    assert node.requests("POST", "/v1/claims") == []


async def test_weights_and_a_range_exclude_each_other(node):
    async with AsyncClient(node.url) as c:
        with pytest.raises(ValueError, match="tier_weights"):
            await c.claim("w", ["t"], priorities=(0, 3), tier_weights={"low": 1})
    assert node.requests("POST", "/v1/claims") == []
