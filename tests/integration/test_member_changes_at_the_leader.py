"""A membership change is decided by the leader's view of the members, at whatever node it
is sent: a node that has not applied a change yet (it was down meanwhile, and has not
caught up) must not answer 404 "no member" for a member the cluster counts on for its
quorum, nor 200 "already a member" for one that was removed. `stall_follower_apply` holds
that node's apply for as long as the test needs."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.harness.cluster import Cluster
from tests.harness.waits import wait_until

pytestmark = pytest.mark.slow


def member_ids(c: Cluster, node: str) -> list[str] | None:
    """The members as `node` sees them; None while it does not answer."""
    try:
        status, body = c.call(node, "GET", "/v1/cluster/members", timeout_s=5)
    except httpx.HTTPError:
        return None
    return [m["id"] for m in body["members"]] if status == 200 else None


def sees_a_leader(c: Cluster, node: str) -> bool:
    return (c.self_status(node, timeout_s=5) or {}).get("leader") is not None


@contextlib.contextmanager
def restarted_lagging(c: Cluster, node: str, tmp_path: Path) -> Iterator[None]:
    """`node` (stopped) started again with its apply held (`stall_follower_apply`), once it
    serves and sees a leader; its apply goes on when the block ends."""
    record = tmp_path / "record"
    stall = Path(f"{record}.apply_stall")
    stall.write_text("held")
    c.node_env[node] = {"TSCHED_FAILPOINTS": "stall_follower_apply",
                        "TSCHED_FAILPOINTS_RECORD": str(record)}
    c.start_node(node)
    try:
        wait_until(lambda: sees_a_leader(c, node), 60,
                   "the restarted node serving, and seeing a leader")
        yield
    finally:
        stall.unlink()


def test_a_member_is_removed_through_a_node_that_has_not_seen_it_join(tmp_path):
    with Cluster(tmp_path, size=3) as c:
        c.start()
        leader = c.wait_leader()
        lagging = c.followers(leader)[0]
        c.stop(lagging)
        c.add_node("n4", leader)
        wait_until(lambda: "n4" in (member_ids(c, leader) or []), 60, "n4 a member")
        with restarted_lagging(c, lagging, tmp_path):
            assert "n4" not in member_ids(c, lagging)     # it has not applied the join
            status, body = c.call(lagging, "DELETE", "/v1/cluster/members/n4")
        assert status == 200, body
        assert "n4" not in [m["id"] for m in body["members"]]
        wait_until(lambda: "n4" not in (member_ids(c, leader) or ["n4"]), 30, "n4 removed")
        c.forget("n4")


def test_a_removed_member_is_added_again_through_a_node_that_has_not_seen_it_leave(tmp_path):
    with Cluster(tmp_path, size=3) as c:
        c.start()
        leader = c.wait_leader()
        c.add_node("n4", leader)
        wait_until(lambda: "n4" in (member_ids(c, leader) or []), 60, "n4 a member")
        n4 = {"id": "n4", "raft": c.raft["n4"], "http": c.http["n4"]}
        lagging = c.followers(leader)[0] if c.followers(leader)[0] != "n4" \
            else c.followers(leader)[1]
        c.stop(lagging)
        wait_until(lambda: c.call(c.wait_leader(), "DELETE", "/v1/cluster/members/n4")[0]
                   in (200, 404), 60, "n4 removed while the lagging node is down")
        c.stop("n4")
        with restarted_lagging(c, lagging, tmp_path):
            assert "n4" in member_ids(c, lagging)          # it has not applied the removal
            status, body = c.call(lagging, "POST", "/v1/cluster/members", n4)
        assert status == 200, body
        # Added for real, at the leader: not a stale "already a member" from the lagging node.
        assert "n4" in member_ids(c, c.wait_leader())
        status, body = c.call(c.wait_leader(), "DELETE", "/v1/cluster/members/n4")
        assert status == 200, body
        c.forget("n4")
