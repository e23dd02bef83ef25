"""Membership changes of a sharded cluster (DESIGN 6.2): a node joins every shard group
through one `--join`, and one removal takes a node out of every group, under a load that
spans the shards, with nothing lost and every shard's replicas equal; the removed node
never comes back with its old data."""
from __future__ import annotations

import httpx
import pytest

from tests.harness.cluster import Cluster, running
from tests.harness.waits import wait_until
from tests.integration.test_membership_cluster import COMPACT_OFTEN, change, not_a_member
from tests.integration.test_node_faults import Load, assert_all_present
from tsched.node.topology import shard_of_tenant, shifted
from tsched.node.config import internal_http

pytestmark = pytest.mark.slow

SHARDS = 2
CHANGE_S = 60
# Tenants of both shards, so that the load writes to every group.
TENANTS = tuple(t for t in (f"tenant-{i}" for i in range(8)))


@pytest.fixture
def c(tmp_path):
    yield from running(tmp_path, size=3, shards=SHARDS, extra_toml=COMPACT_OFTEN)


def listing(c: Cluster, via: str, query: str = "") -> list[dict] | None:
    try:
        status, body = c.call(via, "GET", "/v1/cluster/members" + query, timeout_s=5)
    except httpx.HTTPError:
        return None
    return body["members"] if status == 200 else None


def ids_of(c: Cluster, via: str, query: str = "") -> list[str] | None:
    members = listing(c, via, query)
    return None if members is None else sorted(m["id"] for m in members)


def replica_ids(c: Cluster, node: str, shard: int) -> list[str] | None:
    """The members `node`'s own replica of `shard` names (its internal API: a router would
    ask another replica when its own does not answer)."""
    url = f"http://{internal_http(shifted(c.raft[node], shard))}/v1/cluster/members"
    try:
        r = httpx.get(url, timeout=5)
    except httpx.HTTPError:
        return None
    return sorted(m["id"] for m in r.json()["members"]) if r.status_code == 200 else None


def wait_groups(c: Cluster, want: list[str], on: list[str] | None = None) -> None:
    """Every node of `on` (default: `want`) names `want` as the nodes, and each of its
    shard replicas too."""
    for node in on or want:
        wait_until(lambda node=node: ids_of(c, node) == want, CHANGE_S,
                   f"{node} to name the nodes {want}")
        for s in range(SHARDS):
            wait_until(lambda node=node, s=s: replica_ids(c, node, s) == want,
                       CHANGE_S, f"{node}'s replica of shard {s} to name {want}")


def shard_views(c: Cluster, via: str) -> dict[int, set] | None:
    shards = c.shard_status(via)
    if not shards or len(shards) != SHARDS:
        return None
    return {s["shard"]: {(n["id"], n.get("applied_seq"), n.get("digest")) for n in s["nodes"]}
            for s in shards}


def wait_shards_equal(c: Cluster, via: str, want: list[str]) -> None:
    """Each shard's replicas are `want` and report one applied_seq and one digest."""
    def agreed():
        views = shard_views(c, via)
        return views is not None and all(
            sorted(i for i, _, _ in v) == want and len({(a, d) for _, a, d in v}) == 1
            and None not in next(iter(v))[1:] for v in views.values())
    wait_until(agreed, CHANGE_S, f"every shard's replicas {want} to agree")


def test_a_node_joins_every_shard_and_a_removal_leaves_every_shard(c):
    assert {shard_of_tenant(t, SHARDS) for t in TENANTS} == set(range(SHARDS))
    with Load(c, "grow-shards", tenants=TENANTS) as load:
        load.wait_acks(30)
        c.add_node("n4", "n2")                     # its file lists n4 alone
        wait_groups(c, ["n1", "n2", "n3", "n4"])
        c.wait_shard_leaders(timeout_s=CHANGE_S)    # n4's replicas follow the leaders
        shard1 = {m["id"]: m for m in listing(c, "n4", "?shard=1")}
        host, port = c.raft["n4"].rsplit(":", 1)
        assert shard1["n4"]["raft"] == f"{host}:{int(port) + 100}"     # shard 1's port
        assert shard1["n4"]["http"] == c.http["n4"]                    # the node's API
        assert listing(c, "n1") == [{"id": n, "raft": c.raft[n], "http": c.http[n]}
                                    for n in ("n1", "n2", "n3", "n4")]
        acked = len(load.acked)
        load.wait_acks(acked + 30)                 # still taking writes
        # the leader of shard 0 leaves every group (it hands shard 0 over first)
        victim = c.wait_shard_leaders(timeout_s=CHANGE_S)[0]
        rest = sorted(set(c.ids) - {victim})
        change(c, "DELETE", f"/v1/cluster/members/{victim}")
        wait_groups(c, rest)
        # Still running, it says so: each of its replicas learns it from its group's
        # refusals or, dialled by none, asks the group's replicas (DESIGN 6.2).
        wait_until(lambda: not_a_member(c, victim), CHANGE_S,
                   f"{victim}'s /readyz to say it is not a member")
        assert c.stop(victim) == 0
        c.forget(victim)
        acked = len(load.acked)
        load.wait_acks(acked + 30)
    assert c.exited_unexpectedly() == {}
    c.wait_shard_leaders(timeout_s=CHANGE_S)
    assert_all_present(c, "n4", list(load.acked))
    assert load.completed, "the worker completed nothing"
    wait_shards_equal(c, rest[0], rest)
    # --join with its old data: the cluster no longer names it
    c.start_node(victim, "--join", c.url(rest[0]))
    assert c.procs[victim].wait(timeout=60) == 2
    assert "not a member of the cluster" in c.log(victim)


def test_a_sigkilled_node_is_replaced_in_every_shard(c):
    """n3 dies for good; n4 joins on other ports (each group's addition needs n4's own
    vote: its start commits it), then n3 is removed from every group (DESIGN 6.2,
    docs/operations.md 7.1)."""
    with Load(c, "replace-shards", tenants=TENANTS) as load:
        load.wait_acks(30)
        c.kill("n3")
        c.forget("n3")
        c.add_node("n4", "n1")
        wait_groups(c, ["n1", "n2", "n3", "n4"], on=["n1", "n2", "n4"])
        change(c, "DELETE", "/v1/cluster/members/n3")
        wait_groups(c, ["n1", "n2", "n4"])
        for node in ("n1", "n2", "n4"):
            for s in range(SHARDS):
                assert replica_ids(c, node, s) == ["n1", "n2", "n4"]
        acked = len(load.acked)
        load.wait_acks(acked + 30)
    c.wait_shard_leaders(timeout_s=CHANGE_S)
    assert_all_present(c, "n4", list(load.acked))
    assert load.completed, "the worker completed nothing"
    wait_shards_equal(c, "n4", ["n1", "n2", "n4"])
    assert c.exited_unexpectedly() == {}
