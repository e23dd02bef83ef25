"""Every input limit answers with its 4xx code, never a 500 (DESIGN.md sections 5 and 7):
body size, JSON nesting, batch sizes, string lengths, payload and result sizes, header and
query sizes. Through the real app on a single-node Raft cluster (test_api_harness)."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.api_support import Api, assert_error, until
from tsched.node.scheduling import waiters
from tsched.node.api import validate
from tsched.node.services import Node
from tsched.node.api.app import BODY_BYTES_MAX
from tsched.node.assembly import node_app
from tsched.node.api.auth import digest_of
from tsched.node.clock import Clock
from tsched.node.config import ClusterConfig, NodeConfig


def nested(depth: int):
    value: object = 1
    for _ in range(depth - 1):
        value = [value]
    return [value]


async def test_a_body_over_the_size_limit_is_too_large(api: Api):
    raw = b'{"task_type": "t", "payload": "' + b"x" * BODY_BYTES_MAX + b'"}'
    status, body = await api.call("POST", "/v1/tasks", raw=raw,
                                  headers={"Content-Type": "application/json"})
    assert_error(status, body, 413, "too_large")
    # It names the size, the limit in bytes and what the limit applies to.
    message = body["error"]["message"]
    assert f"is {len(raw)} bytes" in message and f"the limit is {BODY_BYTES_MAX} bytes" in message
    assert "whole request body" in message, message
    assert body["error"]["details"] == {"status": 413, "field": "body",
                                        "limit": BODY_BYTES_MAX}, body


async def test_json_nesting_is_bounded(api: Api):
    depth = validate.JSON_DEPTH_MAX
    ok = await api.submit(task_type="deep", payload=nested(depth - 1))   # body adds one level
    assert ok["state"] == "pending"
    status, body = await api.call("POST", "/v1/tasks", {"task_type": "deep",
                                                        "payload": nested(depth)})
    assert_error(status, body, 413, "too_large")
    # Deeper than the JSON parser itself goes: refused as unparsable, still a 4xx.
    raw = b'{"task_type": "deep", "payload": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    status, body = await api.call("POST", "/v1/tasks", raw=raw)
    assert_error(status, body, 400, "invalid_argument")
    status, body = await api.call("POST", "/v1/completions",
                                  {"completions": [{"task_id": "x", "fencing_token": 1,
                                                    "result": nested(depth)}]})
    assert_error(status, body, 413, "too_large")


def test_depth_check_reads_wide_documents_and_refuses_deep_ones():
    wide = {"tasks": [{"payload": {"a": [1, {"b": 2}]}} for _ in range(500)]}
    validate.json_depth(wide, str(wide).encode())
    with pytest.raises(validate.ApiError, match="deeper than 3"):
        validate.json_depth({"a": {"b": {"c": {}}}}, b"{{{{", limit=3)


@pytest.mark.parametrize("path, key", [("/v1/tasks", "tasks"),
                                       ("/v1/completions", "completions"),
                                       ("/v1/heartbeats", "heartbeats")])
async def test_batches_over_the_limit_are_too_large(api: Api, path, key):
    item = {"task_type": "t"} if key == "tasks" else {"task_id": "t", "fencing_token": 1}
    status, body = await api.call("POST", path, {key: [item] * (validate.BATCH_MAX + 1)})
    assert_error(status, body, 413, "too_large")


@pytest.mark.parametrize("field, value", [
    ("task_type", "t" * (validate.ID_CHARS_MAX + 1)),
    ("tenant", "t" * 65),
    ("idempotency_key", "k" * (validate.IDEMPOTENCY_KEY_CHARS_MAX + 1)),
    ("task_type", "bad\x00type"),
])
async def test_overlong_or_odd_strings_are_invalid(api: Api, field, value):
    status, body = await api.call("POST", "/v1/tasks", {"task_type": "t", field: value})
    assert_error(status, body, 400, "invalid_argument")


async def test_payloads_and_results_over_their_limits_are_too_large(api: Api):
    status, body = await api.call("POST", "/v1/tasks", {
        "task_type": "t", "payload": "x" * (validate.PAYLOAD_BYTES_MAX + 1)})
    assert_error(status, body, 413, "too_large")
    # Under the HTTP bound but over the replicated state's own (Limits.payload_bytes_max).
    status, body = await api.call("POST", "/v1/tasks", {"task_type": "t",
                                                        "payload": "x" * 100_000})
    assert_error(status, body, 413, "too_large")
    kind = "lim-" + uuid.uuid4().hex[:8]
    await api.submit(task_type=kind)
    (task,) = await api.claim([kind])
    status, body = await api.call("POST", f"/v1/tasks/{task['task_id']}/complete", {
        "fencing_token": task["fencing_token"], "result": "r" * (validate.PAYLOAD_BYTES_MAX + 1)})
    assert_error(status, body, 413, "too_large")


async def test_claim_bounds_are_invalid_arguments(api: Api):
    base = {"worker_id": "w", "task_types": ["t"]}
    for extra in ({"max_tasks": validate.CLAIM_TASKS_MAX + 1}, {"wait_s": validate.WAIT_S_MAX + 1},
                  {"task_types": ["t"] * 0}, {"task_types": [f"t{i}" for i in range(51)]},
                  {"lease_s": validate.LEASE_S_MAX + 1}, {"prefetch_ms": 1001}):
        status, body = await api.call("POST", "/v1/claims", {**base, **extra})
        assert_error(status, body, 400, "invalid_argument")


async def test_oversized_headers_and_query_strings_are_refused_not_crashed(api: Api):
    resp = await api.client.get("/v1/tasks", headers={"X-Big": "h" * 20_000})
    assert 400 <= resp.status < 500
    status, body = await api.call("GET", "/v1/tasks?cursor=" + "c" * 600)
    assert_error(status, body, 400, "invalid_argument")
    status, body = await api.call("GET", "/v1/tasks?limit=100000")
    assert_error(status, body, 400, "invalid_argument")


async def _fill_waiting_room(api: Api, n: int, body: dict, headers: dict) -> list:
    """n long polls that stay waiting (no task of their type exists), registered."""
    hub = api.node.claims
    before = hub.waiting
    polls = [asyncio.ensure_future(api.call("POST", "/v1/claims", body, headers=headers))
             for _ in range(n)]
    await until(lambda: hub.waiting >= before + n, f"{n} waiting claims")
    return polls


async def test_waiting_claims_per_worker_are_bounded(api: Api, monkeypatch):
    monkeypatch.setattr(waiters, "WAITERS_PER_WORKER_MAX", 3)
    kind = "none-" + uuid.uuid4().hex[:8]
    body = {"worker_id": "greedy", "task_types": [kind], "wait_s": 2}
    polls = await _fill_waiting_room(api, 3, body, {})
    status, out = await api.call("POST", "/v1/claims", body)
    assert_error(status, out, 429, "tenant_limit")
    assert out["error"]["details"]["worker_id"] == "greedy"
    status, out = await api.call("POST", "/v1/claims", {**body, "worker_id": "other",
                                                        "wait_s": 0})
    assert status == 200 and out["tasks"] == [], out          # another worker still may
    for status, out in await asyncio.gather(*polls):
        assert status == 200 and out["tasks"] == [], out
    assert api.node.claims.waiting == 0                      # counts went back down
    status, out = await api.call("POST", "/v1/claims", {**body, "wait_s": 0})
    assert status == 200, out


async def test_waiting_claims_per_tenant_token_are_bounded(replica, aiohttp_client, monkeypatch):
    monkeypatch.setattr(waiters, "WAITERS_PER_TENANT_MAX", 2)
    auth = {"tenant_token_sha256": {"acme": [digest_of("acme-t")],
                                    "globex": [digest_of("globex-t")]}}
    me = NodeConfig(id="n1", raft=replica.self_raft, http="127.0.0.1:1", data_dir="/x")
    node = Node(node_id="n1", config=ClusterConfig(name="t", nodes=(me,), auth=auth),
                replica=replica, clock=Clock())
    api = Api(await aiohttp_client(node_app(node)), node)
    kind = "none-" + uuid.uuid4().hex[:8]
    acme = {"Authorization": "Bearer acme-t"}
    polls = [await _fill_waiting_room(api, 1, {"worker_id": f"w{i}", "task_types": [kind],
                                               "wait_s": 2}, acme) for i in range(2)]
    status, out = await api.call("POST", "/v1/claims", {"worker_id": "w9", "task_types": [kind],
                                                        "wait_s": 1}, headers=acme)
    assert_error(status, out, 429, "tenant_limit")
    assert out["error"]["details"]["tenant"] == "acme"
    status, out = await api.call("POST", "/v1/claims", {"worker_id": "g", "task_types": [kind],
                                                        "wait_s": 0},
                                 headers={"Authorization": "Bearer globex-t"})
    assert status == 200, out                                # other tenants are not affected
    for status, out in await asyncio.gather(*(p for batch in polls for p in batch)):
        assert status == 200 and out["tasks"] == [], out
