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
    status, body = await api.call("GET", "/livez")
    assert status == 200 and body == {"status": "alive", "node": "n1"}
    status, body = await api.call("GET", "/readyz")
    assert status == 200 and body["leader"] == "n1"
    assert isinstance(body["applied_seq"], int) and body["applied_seq"] >= 1


async def test_unknown_path_and_method_use_the_error_shape(api):
    status, body = await api.call("GET", "/v1/nothing")
    assert_error(status, body, 404, "not_found")
    # No route: told apart from a missing resource (a client's wrong base URL, DESIGN 7).
    assert body["error"]["details"] == {"status": 404, "reason": "no_route"}, body
    status, body = await api.call("GET", "/v1/v1/tasks")
    assert_error(status, body, 404, "not_found")
    assert body["error"]["details"]["reason"] == "no_route", body
    status, body = await api.call("GET", "/v1/tasks/" + "0" * 32)
    assert_error(status, body, 404, "not_found")
    assert "reason" not in body["error"].get("details", {}), body
    status, body = await api.call("GET", "/static/nothing.js")     # a route, no such asset
    assert status == 404 and body["error"]["details"].get("reason") != "no_route", body
    status, body = await api.call("DELETE", "/v1/tasks")
    assert_error(status, body, 405, "method_not_allowed")


async def test_a_cron_refusal_names_the_field_and_its_range(api):
    status, body = await api.call("PUT", "/v1/schedules/hourly",
                                  {"cron": "61 * * * *", "task": {"task_type": "report"}})
    assert_error(status, body, 400, "invalid_argument")
    assert "the minute field '61' is not valid (the minute takes 0-59" in body["error"]["message"]
    status, body = await api.call("GET", "/v1/cron/preview?cron=0+0+*+13+*")
    assert_error(status, body, 400, "invalid_argument")
    assert "the month field '13' is not valid (the month takes 1-12" in body["error"]["message"]
