"""Graceful handoff on real clusters: a leader stopped with SIGTERM hands its leadership to
a caught-up follower before it exits, so the others have a ready leader the moment it is
gone (without the handoff they would still be waiting out an election timeout)."""
from __future__ import annotations

import time
import uuid

import httpx
import pytest

from tests.harness.cluster import Cluster, running
from tests.integration.test_node_faults import Load, assert_all_present, wait_equal_digests

pytestmark = pytest.mark.slow


@pytest.fixture
def fresh_cluster(tmp_path):
    """tsnode's own election timeouts: this module's tests are about what happens within
    one (the conftest's cluster has the harness's short ones)."""
    yield from running(tmp_path, fast_raft=False)


def ready_leader_now(c: Cluster, among: list[str]) -> str | None:
    """One look, no waiting: the node among `among` that is a ready leader."""
    seen = {i: c.self_status(i) for i in among}
    ready = [i for i, s in seen.items() if s and s["role"] == "leader" and s["ready"]]
    return ready[0] if len(ready) == 1 else None


def wait_fully_connected(c: Cluster, timeout_s: float = 20) -> None:
    """Every node reaches every peer: what a rolling restart waits for before it stops the
    next node (a successor that cannot reach a majority without the leaver cannot lead)."""
    deadline = time.monotonic() + timeout_s
    want = len(c.ids) - 1
    while True:
        seen = {i: peers_connected(c, i) for i in c.ids}
        if all(n == want for n in seen.values()):
            return
        assert time.monotonic() < deadline, seen
        time.sleep(0.05)


def peers_connected(c: Cluster, node: str) -> int | None:
    try:
        status, text = c.call(node, "GET", "/metrics")
    except httpx.HTTPError:
        return None      # not listening yet
    for line in text.splitlines() if status == 200 else []:
        if line.startswith("tsched_raft_peers_connected "):
            return int(float(line.split()[1]))
    return None


def test_a_stopped_leader_has_handed_over_before_it_exits(fresh_cluster: Cluster):
    c = fresh_cluster
    old = c.wait_leader()
    assert c.stop(old) == 0
    new = ready_leader_now(c, c.followers(old))
    assert new is not None, {i: c.self_status(i) for i in c.followers(old)}
    assert "event=handoff_done" in c.log(old)


def test_a_rolling_restart_under_load_hands_over_at_every_leader_stop(fresh_cluster: Cluster):
    c = fresh_cluster
    with Load(c, "roll-" + uuid.uuid4().hex[:6]) as load:
        load.wait_acks(30)
        for node in list(c.ids):
            was_leader = c.wait_leader() == node
            assert c.stop(node) == 0
            if was_leader:
                assert ready_leader_now(c, c.followers(node)) is not None, (
                    [{k: s.get(k) for k in ("id", "role", "ready", "leader", "term", "peers")}
                     for s in map(c.self_status, c.followers(node)) if s], c.log(node, 600))
            c.start_node(node)
            load.wait_acks(len(load.acked) + 20)
            wait_fully_connected(c)
        leader = c.wait_leader()
    assert_all_present(c, leader, list(load.acked))
    assert load.completed, "the worker completed nothing"
    wait_equal_digests(c)


def test_a_cluster_stopped_all_at_once_does_not_wait_for_a_handoff(fresh_cluster: Cluster):
    """Every node gets SIGTERM together (`tsctl dev`'s Ctrl-C, a whole-cluster stop): no
    follower stays to take over, so the leader stops without waiting out its handoff. The
    signals arrive one after another: a follower whose own stop has not yet closed its
    connections may still take the leadership over (in milliseconds); either way the
    leader never waits for the handoff's timeout."""
    c = fresh_cluster
    leader = c.wait_leader()
    c.stop_all()
    assert {i: p.returncode for i, p in c.procs.items()} == {i: 0 for i in c.ids}
    log = c.log(leader, 100_000)
    assert ("event=handoff_skipped reason=no_peer_connected" in log
            or "event=handoff_done" in log), log[-2000:]
    assert "event=handoff_timeout" not in log
