"""GET /v1/audit on a 3-node cluster with 3 shards (DESIGN 14.6): any node's router asks
every shard and merges their trails newest first, across pages; `tsctl audit` reads it."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tsched.client import Client
from tsched.client.cli import cli
from tsched.node.topology import shard_of_tenant

from tests.harness.cluster import running
from tests.harness.waits import wait_until

pytestmark = pytest.mark.slow
SHARDS = 3


@pytest.fixture
def sharded(tmp_path):
    yield from running(tmp_path, shards=SHARDS)


def test_the_trail_merges_every_shard_newest_first(sharded):
    tenants = {}
    for i in range(64):
        tenants.setdefault(shard_of_tenant(f"team-{i}", SHARDS), f"team-{i}")
    assert len(tenants) == SHARDS
    order = [tenants[s] for s in range(SHARDS)] * 2
    with Client([sharded.url("n1")], timeout_s=30) as client:
        ids = []
        for tenant in order:      # one cancel after another: times increase
            task = client.submit("t", tenant=tenant)
            client.cancel(task["task_id"])
            ids.append(task["task_id"])

        def n3_trail() -> bool:
            """n3's replicas answer without the writer's min_seq: eventually all, in order."""
            entries = sharded.pages("n3", "/v1/audit", "entries", "limit=4&action=task.cancel")
            return [e["target"] for e in entries] == ids[::-1]
        wait_until(n3_trail, 30, "n3's pages to list every cancel, newest first")
        assert [e["target"] for e in client.audit(limit=2)] == ids[:-3:-1]

    def cli_trail() -> list[dict] | None:
        """tsctl's view through n2, whose replicas answer without the writer's min_seq:
        eventually every entry (a follower replica may not have applied the last ones yet)."""
        result = CliRunner().invoke(cli, ["--url", sharded.url("n2"), "audit", "--json",
                                          "--action", "task.cancel"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        lines = [json.loads(line) for line in result.output.splitlines()]
        return lines if [e["target"] for e in lines] == ids[::-1] else None
    lines = wait_until(cli_trail, 30, "tsctl audit to show every cancel, newest first")
    assert {e["actor"] for e in lines} == {"anonymous"}
