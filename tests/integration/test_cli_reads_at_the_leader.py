"""tsctl reads at the leader: a read sees every write acknowledged before it, whichever node
the write went through, even when it asks a node that has not applied that write yet.

An operator pauses a queue through one node and lists the paused queues through another;
that second node may lag (it was restarted, or is slow), and a read from its own replica
would not show the pause. `stall_follower_apply` holds a follower's apply for as long as
the test needs, so the follower lags for certain. `--consistency local` asks the node's own
replica, and shows the lag: the test would fail if tsctl read locally by default."""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import pytest
from click.testing import CliRunner

from tsched.client.cli import cli

from tests.harness.cluster import Cluster, running

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lagging(tmp_path_factory) -> Iterator[tuple[Cluster, Path]]:
    """A 3-node cluster whose nodes each hold their apply while they follow and their own
    stall file exists (none exists until a test writes one)."""
    root = tmp_path_factory.mktemp("cli-reads")
    env = {n: {"TSCHED_FAILPOINTS": "stall_follower_apply",
               "TSCHED_FAILPOINTS_RECORD": str(root / f"{n}.record")}
           for n in ("n1", "n2", "n3")}
    for c in running(tmp_path_factory.mktemp("cluster"), node_env=env):
        yield c, root


def tsctl(c: Cluster, node: str, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--url", c.url(node), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_pause_made_through_the_leader_is_listed_through_a_lagging_follower(lagging):
    c, root = lagging
    leader = c.wait_leader()
    follower = c.followers(leader)[0]
    stall = root / f"{follower}.record.apply_stall"
    task_type = "bank-" + uuid.uuid4().hex[:6]
    stall.write_text("held")
    try:
        paused = tsctl(c, leader, "pause", "--type", task_type, "--reason", "maintenance")
        assert c.applied_seq(follower) < paused["applied_seq"]     # it lags, for certain
        listed = tsctl(c, follower, "queues")
        local = tsctl(c, follower, "--consistency", "local", "queues")
    finally:
        stall.unlink()
    assert [p["reason"] for p in listed if p["task_type"] == task_type] == ["maintenance"]
    assert all(p["task_type"] != task_type for p in local)
