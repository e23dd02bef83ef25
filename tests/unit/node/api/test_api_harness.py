"""The HTTP API on a real single-node Raft cluster, through aiohttp's test client.

The `replica` and `api` fixtures are in tests/conftest.py. The single node elects itself
(short election timeouts), so every write really goes through Raft, the LMDB log and the
state machine.
"""
from __future__ import annotations

from tests.api_support import assert_error


async def test_health_and_readiness_on_a_single_node(api):
    status, body = await api.call("GET", "/healthz")
    assert status == 200 and body["status"] == "ok"
    status, body = await api.call("GET", "/readyz")
    assert status == 200 and body["leader"] == "n1"
    assert isinstance(body["applied_seq"], int) and body["applied_seq"] >= 1


async def test_unknown_path_and_method_use_the_error_shape(api):
    status, body = await api.call("GET", "/v1/nothing")
    assert_error(status, body, 404, "not_found")
    status, body = await api.call("DELETE", "/v1/tasks")
    assert_error(status, body, 405, "method_not_allowed")
