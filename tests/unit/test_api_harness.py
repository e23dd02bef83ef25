"""The HTTP API on a real single-node Raft cluster, through aiohttp's test client.

Other test_api_* modules import the `api` fixture from here. The single node elects itself
(short election timeouts), so every write really goes through Raft, the LMDB log and the
state machine.
"""
from __future__ import annotations

import socket
import time

import pytest

from tsched.node.api_common import Node
from tsched.node.app import make_app
from tsched.node.clock import Clock
from tsched.node.config import ClusterConfig, NodeConfig
from tsched.node.raft import RaftOptions, Replica

FAST = RaftOptions(raft_min_timeout_s=0.05, raft_max_timeout_s=0.1,
                   leader_fallback_timeout_s=0.1, fsync=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    data = tmp_path_factory.mktemp("replica")
    raft = f"127.0.0.1:{free_port()}"
    r = Replica(self_id="n1", self_raft=raft, peers={}, data_dir=data, options=FAST)
    r.start()
    deadline = time.monotonic() + 10
    while not r.is_ready_leader():
        assert time.monotonic() < deadline, "single node did not become a ready leader"
        time.sleep(0.01)
    yield r
    r.stop()


class Api:
    """A test client with helpers that return (status, json)."""

    def __init__(self, client, node: Node) -> None:
        self.client, self.node = client, node

    async def call(self, method: str, path: str, body=None, *, raw: bytes | None = None,
                   headers: dict | None = None):
        kwargs = {"headers": headers or {}}
        if raw is not None:
            kwargs["data"] = raw
        elif body is not None:
            kwargs["json"] = body
        resp = await self.client.request(method, path, **kwargs)
        return resp.status, await resp.json(content_type=None)

    async def submit(self, **fields):
        fields.setdefault("task_type", "t")
        status, body = await self.call("POST", "/v1/tasks", fields)
        assert status == 201, body
        return body

    async def claim(self, task_types=("t",), **fields):
        body = {"worker_id": "w1", "task_types": list(task_types), "max_tasks": 1,
                "wait_s": 0, **fields}
        status, out = await self.call("POST", "/v1/claims", body)
        assert status == 200, out
        return out["tasks"]


@pytest.fixture
async def api(replica, aiohttp_client):
    me = NodeConfig(id="n1", raft=replica.self_raft, http="127.0.0.1:1", data_dir="/nonexistent")
    node = Node(node_id="n1", config=ClusterConfig(name="t", nodes=(me,)), replica=replica,
                clock=Clock())
    client = await aiohttp_client(make_app(node))
    yield Api(client, node)


def assert_error(status: int, body, want_status: int, code: str) -> None:
    assert status == want_status, body
    assert set(body) >= {"error"}, body
    err = body["error"]
    assert err["code"] == code, body
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["details"], dict)


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
