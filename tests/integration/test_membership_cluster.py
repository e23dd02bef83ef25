"""Online membership changes on real clusters (DESIGN 6.2): grow 3 -> 5 and shrink back,
and replace a SIGKILLed node, under a submit/claim load with nothing lost and equal digests
on every member; a removed node never comes back with its old data."""
from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest
from click.testing import CliRunner

from tests.harness.cluster import Cluster, running
from tests.harness.waits import wait_until
from tests.integration.test_node_faults import Load, assert_all_present, wait_equal_digests
from tsched.client.cli import cli

pytestmark = pytest.mark.slow

CHANGE_S = 60     # a change waits for its commit; generous: the machine may be loaded
# How long a removed node is watched: many of its election timeouts (fast ones here,
# raft_options.FAST); an observation window, not a wait for a condition.
OBSERVE_S = 3.0


# Compaction every few entries: new members catch up by snapshot (DESIGN 6.2), and
# snapshots carry the members.
COMPACT_OFTEN = "\n[cluster.compaction]\nmin_entries = 50\n"


@pytest.fixture
def c(tmp_path):
    yield from running(tmp_path, size=3, extra_toml=COMPACT_OFTEN)


def members_of(c: Cluster, via: str) -> list[str] | None:
    try:
        status, body = c.call(via, "GET", "/v1/cluster/members", timeout_s=5)
    except httpx.HTTPError:
        return None
    return sorted(m["id"] for m in body["members"]) if status == 200 else None


def wait_members(c: Cluster, want: list[str], on: list[str] | None = None) -> None:
    """Each node of `on` (default: `want`) names the members `want`; a timeout shows what
    that node last named and the end of its log."""
    for node in on or want:
        try:
            wait_until(lambda node=node: members_of(c, node) == sorted(want), CHANGE_S,
                       f"{node} to name the members {want}")
        except AssertionError as e:
            raise AssertionError(f"{e}; it names {members_of(c, node)}\n--- {node}\n"
                                 f"{c.log(node)}") from None


def change(c: Cluster, method: str, path: str, body=None) -> dict:
    """A membership change through any member; retried while another one is in progress
    or leadership moves (both answered before anything is changed), and after an answer
    that leaves the outcome unknown (no answer, 503 or 504: the change may have been made).
    A removal retried after such an answer and answered 404 (no such member) was made."""
    unknown = False

    def attempt():
        nonlocal unknown
        for via in c.ids:
            try:
                status, out = c.call(via, method, path, body, timeout_s=CHANGE_S)
            except httpx.HTTPError:
                unknown = True
                continue
            if status == 200:
                return out
            if status == 404 and method == "DELETE" and unknown:
                status, out = c.call(via, "GET", "/v1/cluster/members", timeout_s=CHANGE_S)
                return out if status == 200 else None
            assert status in (409, 503, 504), (status, out)
            if status == 409:
                assert out["error"]["details"]["reason"] == "change_in_progress", out
            else:
                unknown = True
        return None
    return wait_until(attempt, CHANGE_S, f"{method} {path}", step_s=0.5)


def assert_completed(c: Cluster, node: str, task_ids) -> None:
    with httpx.Client(timeout=10) as client:
        for tid in task_ids:
            r = client.get(c.url(node) + f"/v1/tasks/{tid}?consistency=linearizable")
            assert r.status_code == 200 and r.json()["state"] == "completed", r.text


def assert_nothing_lost(c: Cluster, load: Load) -> None:
    leader = c.wait_leader(timeout_s=CHANGE_S)
    assert_all_present(c, leader, list(load.acked))
    assert load.completed, "the worker completed nothing"
    assert_completed(c, leader, list(load.completed))
    wait_equal_digests(c, timeout_s=CHANGE_S)


def test_grow_to_five_and_shrink_back_to_three_under_load(c: Cluster):
    with Load(c, "grow-" + uuid.uuid4().hex[:6], submitters=1) as load:
        load.wait_acks(20)
        c.add_node("n4", "n1")                 # asks to be added, then catches up
        wait_members(c, ["n1", "n2", "n3", "n4"])
        raft, http = _new_ports(c, "n5")      # tsctl first; the node then finds itself named
        result = CliRunner().invoke(cli, ["--url", c.url("n2"), "--json", "cluster", "add-node",
                                          "n5", "--raft", raft, "--http", http])
        assert result.exit_code == 0, result.output
        assert [m["id"] for m in json.loads(result.output)["members"]] == [
            "n1", "n2", "n3", "n4", "n5"]
        c.add_node("n5", "n2", ports=(raft, http))
        wait_members(c, ["n1", "n2", "n3", "n4", "n5"])
        acked = len(load.acked)
        load.wait_acks(acked + 20, timeout_s=CHANGE_S)   # the five serve writes
        # Every member agrees on the state, the new ones too.
        status, cluster = c.call("n5", "GET", "/v1/cluster")
        assert status == 200 and len(cluster["nodes"]) == 5, cluster
        for gone in ("n4", "n5"):
            change(c, "DELETE", f"/v1/cluster/members/{gone}")
            c.forget(gone)
        wait_members(c, ["n1", "n2", "n3"])
        load.wait_acks(len(load.acked) + 20, timeout_s=CHANGE_S)
    assert_nothing_lost(c, load)
    for gone in ("n4", "n5"):
        assert c.stop(gone) == 0


def test_growing_shows_equal_digests_on_all_five(c: Cluster):
    with Load(c, "five-" + uuid.uuid4().hex[:6], submitters=1) as load:
        load.wait_acks(10)
        c.add_node("n4", "n3")
        wait_members(c, ["n1", "n2", "n3", "n4"])
        c.add_node("n5", "n1")
        wait_members(c, ["n1", "n2", "n3", "n4", "n5"])
        load.wait_acks(len(load.acked) + 10, timeout_s=CHANGE_S)
    assert c.ids == ["n1", "n2", "n3", "n4", "n5"]
    assert_nothing_lost(c, load)
    status, cluster = c.call("n4", "GET", "/v1/cluster")
    digests = {n["id"]: n["digest"] for n in cluster["nodes"]}
    assert sorted(digests) == c.ids and len(set(digests.values())) == 1, cluster


def test_removing_the_leader_hands_over_first(c: Cluster):
    c.add_node("n4", "n2")
    wait_members(c, ["n1", "n2", "n3", "n4"])
    leader = c.wait_leader()
    out = change(c, "DELETE", f"/v1/cluster/members/{leader}")
    assert leader not in [m["id"] for m in out["members"]] and out["leader"] != leader
    c.forget(leader)
    wait_members(c, sorted(c.ids))
    assert c.wait_leader() != leader
    # at the leader: a member names the new members once the change is in its log, maybe
    # before it has applied the audit entry committed ahead of it
    status, audit = c.call(c.ids[0], "GET",
                           "/v1/audit?action=cluster.remove_member&consistency=linearizable")
    assert status == 200 and [e["target"] for e in audit["entries"]] == [leader], audit


def test_replace_a_killed_node_under_load(c: Cluster):
    """The operations guide's procedure: the replacement joins first (a cluster never
    shrinks below three members; with one member dead, its own start commits its addition),
    then tsctl removes the dead node."""
    with Load(c, "replace-" + uuid.uuid4().hex[:6], submitters=1) as load:
        load.wait_acks(20)
        dead = next(i for i in c.ids if i != c.wait_leader())
        c.kill(dead)
        c.add_node("n4", next(i for i in c.ids if i != dead))
        wait_until(lambda: (c.self_status("n4") or {}).get("leader"), CHANGE_S,
                   "n4 to follow the leader")
        tsctl = ["--url", ",".join(c.url(i) for i in c.ids if i != dead), "--json"]
        result = CliRunner().invoke(cli, [*tsctl, "cluster", "remove-node", dead])
        assert result.exit_code == 0, result.output
        assert dead not in [m["id"] for m in json.loads(result.output)["members"]]
        c.forget(dead)
        wait_members(c, sorted(c.ids))
        load.wait_acks(len(load.acked) + 20, timeout_s=CHANGE_S)
    assert_nothing_lost(c, load)


def _new_ports(c: Cluster, node_id: str) -> tuple[str, str]:
    from tests.harness.ports import node_addresses
    raft, http = node_addresses([node_id], 1)
    return raft[node_id], http[node_id]


def _dialling_ports() -> tuple[str, str]:
    """Free loopback ports whose address string is greater than any harness port's (those
    are 10000 and above): a node there dials every other (pysyncobj's rule)."""
    from tests.harness.ports import _is_free
    port = next(p for p in range(9000, 9990, 2) if _is_free(p) and _is_free(p + 1))
    return f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"


def test_a_removed_node_cannot_rejoin_with_its_old_data(c: Cluster):
    c.add_node("n4", "n1", ports=_dialling_ports())
    wait_members(c, ["n1", "n2", "n3", "n4"])
    wait_equal_digests(c, timeout_s=CHANGE_S)
    assert c.stop("n4") == 0
    change(c, "DELETE", "/v1/cluster/members/n4")
    wait_members(c, ["n1", "n2", "n3"])
    c.forget("n4")
    # --join with its old data: the cluster no longer names it.
    c.start_node("n4", "--join", c.url("n1"))
    assert c.procs["n4"].wait(timeout=60) == 2
    assert "not a member of the cluster" in c.log("n4") and "removed" in c.log("n4")
    # Without --join it starts from what it recorded, but no member answers it (their Raft
    # transports refuse an identity that is not a member): over many of its election
    # timeouts it learns of no leader, and it moves neither the cluster's term nor members.
    leader = c.wait_leader()
    term = c.self_status(leader)["term"]
    c.start_node("n4")
    wait_until(lambda: c.self_status("n4"), CHANGE_S, "n4 to serve HTTP")
    watched = time.monotonic()
    while time.monotonic() - watched < OBSERVE_S:
        assert (c.self_status("n4") or {}).get("leader") is None
        time.sleep(0.1)
    assert c.wait_leader() == leader and c.self_status(leader)["term"] == term
    assert members_of(c, leader) == ["n1", "n2", "n3"]
    # n4 dials the members (its address is the greater) and every one refuses it; their
    # answer ("FAIL refused", when it arrives) is never taken for a Raft message (that
    # failed n4's ticks).
    wait_until(lambda: all(f"refused identity '{c.raft['n4']}'" in c.log(i, 100_000)
                           for i in ("n1", "n2", "n3")), CHANGE_S, "every member to refuse n4")
    log = c.log("n4", 100_000)
    assert " ERROR " not in log and "CRITICAL" not in log, log
    assert c.stop("n4") == 0


def _sorting_below_ports(c: Cluster, node_id: str) -> tuple[str, str]:
    """Free loopback ports with a Raft address that sorts below every harness node's
    ("127.0.0.10:..." < "127.0.0.1:...", as "0" < ":"): a node there dials no member, and
    once removed no member dials it (pysyncobj's rule: the greater address dials)."""
    raft, http = _new_ports(c, node_id)
    return raft.replace("127.0.0.1:", "127.0.0.10:"), http


def not_a_member(c: Cluster, node: str) -> dict | None:
    """`node`'s /readyz answer when it says the node is not a member, else None."""
    try:
        status, body = c.call(node, "GET", "/readyz", timeout_s=5)
    except httpx.HTTPError:
        return None
    if status != 503:
        return None
    return body if body["error"]["details"].get("reason") == "not_a_member" else None


def test_a_removed_node_that_still_runs_says_so_on_readyz(c: Cluster):
    """Removed while they run, n4 and n5 say so on /readyz, not merely that they see no
    leader: n4 (its Raft address sorts above every member's) dials the members and every
    one refuses it; n5 (it sorts below every member's) is dialled by none and dials none,
    so once it has seen no leader for a while it asks the members' GET
    /v1/cluster/members (DESIGN 6.2). Added back, n5 is ready again."""
    c.add_node("n4", "n1", ports=_dialling_ports())
    wait_members(c, ["n1", "n2", "n3", "n4"])
    low = _sorting_below_ports(c, "n5")
    assert all(low[0] < c.raft[i] for i in c.ids), (low, c.raft)
    c.add_node("n5", "n2", ports=low)
    wait_members(c, ["n1", "n2", "n3", "n4", "n5"])
    for node in ("n4", "n5"):
        wait_until(lambda node=node: c.call(node, "GET", "/readyz", timeout_s=5)[0] == 200,
                   CHANGE_S, f"{node} to be ready as a member")
    for node in ("n4", "n5"):
        change(c, "DELETE", f"/v1/cluster/members/{node}")
        c.forget(node)
    wait_members(c, ["n1", "n2", "n3"])
    for node in ("n4", "n5"):
        body = wait_until(lambda node=node: not_a_member(c, node), CHANGE_S,
                          f"{node}'s /readyz to say it is not a member")
        error = body["error"]
        assert error["code"] == "unavailable" and error["details"] == {
            "node": node, "leader": None, "reason": "not_a_member"}, body
        # It names the members that refused it (more than half of its peers), or those
        # a member lists.
        named = [m for m in ("n1", "n2", "n3") if m in error["message"]]
        assert "not a member" in error["message"] and len(named) >= 2, body
    log = c.log("n5", 100_000)
    assert log.count("event=removed_from_cluster") == 1, log
    assert " ERROR " not in log and "CRITICAL" not in log, log
    assert c.call("n1", "GET", "/readyz")[0] == 200
    # Added back as it was, n5 hears from the leader again: ready.
    change(c, "POST", "/v1/cluster/members", {"id": "n5", "raft": c.raft["n5"],
                                               "http": c.http["n5"]})
    wait_until(lambda: c.call("n5", "GET", "/readyz", timeout_s=5)[0] == 200, CHANGE_S,
               "n5, added back, to be ready")
    wait_until(lambda: "event=member_again" in c.log("n5", 100_000), CHANGE_S,
               "n5 to log that it is a member again")
    assert c.stop("n4") == 0


def test_a_restart_agrees_with_the_recorded_membership(c: Cluster):
    """After a change, a node whose file lists other members (more than the one member of a
    change apart) stops (exit 2) naming both lists; a file one change behind starts it
    (logged); a joined node restarts from its own file (itself alone), and a node
    restarted after snapshots knows every member's address."""
    for i in range(120):            # past several compactions before the join
        assert c.call("n1", "POST", "/v1/tasks", {"task_type": f"r{i % 3}"})[0] == 201
    c.add_node("n4", "n1")
    wait_members(c, ["n1", "n2", "n3", "n4"])
    wait_equal_digests(c, timeout_s=CHANGE_S)
    assert "restored in" in c.log("n4", 100_000)       # caught up by the leader's snapshot
    assert c.stop("n2") == 0
    stale = c.config_path.read_text()                   # n1..n3: one change behind
    c.config_path.write_text(stale.replace(f'raft = "{c.raft["n3"]}"', 'raft = "127.0.0.1:9"'))
    c.start_node("n2")
    assert c.procs["n2"].wait(timeout=60) == 2
    log = c.log("n2")
    assert "disagrees" in log and c.raft["n4"] in log and "127.0.0.1:9" in log, log
    c.config_path.write_text(stale)
    c.start_node("n2")
    wait_until(lambda: c.self_status("n2"), CHANGE_S, "n2 to serve, one change behind")
    assert "members_file_one_change_apart" in c.log("n2", 100_000)
    assert c.stop("n2") == 0
    c.rewrite_config()
    c.start_node("n2")
    assert c.stop("n4") == 0
    c.start_node("n4")                                   # its file lists n4 alone
    for _ in range(60):
        assert c.call("n3", "POST", "/v1/tasks", {"task_type": "after"})[0] == 201
    wait_equal_digests(c, timeout_s=CHANGE_S)
    status, cluster = c.call("n4", "GET", "/v1/cluster")
    assert [(n["id"], n["http"], n["reachable"]) for n in cluster["nodes"]] == [
        (i, c.http[i], True) for i in c.ids], cluster
