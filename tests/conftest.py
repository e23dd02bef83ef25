"""Fixtures shared by the whole suite.

- `replica`: a real single-node Raft cluster in this process (the harness's FAST options:
  short election timeouts, no fsync), one per test module: every write goes through Raft,
  the LMDB log and the state machine;
- `api`: the node's real aiohttp app on that replica, through aiohttp's test client
  (`tests.api_support.Api`);
- `tt`: a task type of one test only (modules share one replica).

Real multi-node clusters of `tsnode` processes: tests/harness/cluster.py (`Cluster`)
and the `cluster` / `fresh_cluster` fixtures of tests/integration/conftest.py.
"""
from __future__ import annotations

import uuid

import pytest

from tests.api_support import Api
from tests.harness.ports import free_port
from tests.harness.raft_options import FAST
from tests.harness.waits import wait_until
from tsched.node.api.services import Node
from tsched.node.api.app import make_app
from tsched.node.clock import Clock
from tsched.node.config import ClusterConfig, NodeConfig
from tsched.node.raft.replica import Replica


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    data = tmp_path_factory.mktemp("replica")
    raft = f"127.0.0.1:{free_port()}"
    r = Replica(self_id="n1", self_raft=raft, peers={}, data_dir=data, options=FAST)
    r.start()
    wait_until(r.is_ready_leader, 10, "the single node to become a ready leader")
    yield r
    r.stop()


@pytest.fixture
async def api(replica, aiohttp_client):
    me = NodeConfig(id="n1", raft=replica.self_raft, http="127.0.0.1:1", data_dir="/nonexistent")
    node = Node(node_id="n1", config=ClusterConfig(name="t", nodes=(me,)), replica=replica,
                clock=Clock())
    client = await aiohttp_client(make_app(node))
    yield Api(client, node)


@pytest.fixture
def tt() -> str:
    """A task type of this test only: the module shares one replica."""
    return "t-" + uuid.uuid4().hex[:8]
