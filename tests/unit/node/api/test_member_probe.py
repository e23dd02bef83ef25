"""A leaderless node's question to its peers (node/api/member_probe.py, DESIGN 6.2): which
answers count and what they decide, and the peer credential a node signs with the cluster
secret under [auth] (node/api/auth.py). The probe on real nodes, a removed node whose Raft
address sorts below every member's, is in tests/integration/test_membership_cluster.py."""
from __future__ import annotations

import pytest

from tsched.node.api.auth import PEER_HEADER, PEER_STAMP_SKEW_S, digest_of, peer_headers
from tsched.node.api.member_probe import Answer, usable, verdict
from tsched.node.assembly import node_app
from tsched.node.clock import Clock
from tsched.node.config import ClusterConfig, NodeConfig
from tsched.node.raft.membership import Member
from tsched.node.services import Node

ME = Member("n5", "127.0.0.10:9000", "127.0.0.1:9001")
OTHERS = [{"id": i, "raft": f"127.0.0.1:1000{n}", "http": f"127.0.0.1:1100{n}"}
          for n, i in enumerate(("n1", "n2", "n3"))]
WITH_ME = [*OTHERS, ME.to_json()]


def answer(peer: str, index: int | None, members: list, leader: str | None = "n1") -> object:
    return {"members": members, "leader": leader, "changing": index is None,
            "config_index": index}


def test_only_a_peer_that_sees_a_leader_and_settled_members_counts():
    assert usable("n1", answer("n1", 12, OTHERS)) == Answer(
        "n1", "n1", 12, frozenset((m["id"], m["raft"]) for m in OTHERS))
    for doc in (answer("n1", 12, OTHERS, leader=None),      # it sees no leader either
                answer("n1", None, OTHERS),                 # a change is not applied yet
                {**answer("n1", 12, OTHERS), "config_index": True},
                {**answer("n1", 12, OTHERS), "members": "n1"},
                {**answer("n1", 12, OTHERS), "members": [{"id": "x"}] * 65},
                None, [], "not json"):
        assert usable("n1", doc) is None, doc


def test_the_newest_answer_past_this_nodes_log_decides():
    removed = usable("n2", answer("n2", 20, OTHERS, leader="n3"))
    named = usable("n1", answer("n1", 15, WITH_ME))
    assert removed is not None and named is not None
    said = verdict(ME, 10, [named, removed])
    assert isinstance(said, str)
    assert said.startswith("n2 (whose leader is n3) lists the members n1, n2, n3 at Raft "
                           "index 20, past this node's log (10)"), said
    assert verdict(ME, 10, [named]) is False                  # a member after all
    assert verdict(ME, 20, [named, removed]) is None          # nothing newer than its log
    assert verdict(ME, 10, []) is None                        # nobody answered


def test_a_member_is_known_by_its_id_and_raft_address():
    """A new node with this node's id at another address (a replacement) is not this node."""
    moved = [*OTHERS, {"id": ME.id, "raft": "127.0.0.1:9999", "http": ME.http}]
    said = usable("n1", answer("n1", 30, moved))
    assert said is not None and isinstance(verdict(ME, 10, [said]), str)


# --- the peer credential ---------------------------------------------------------------------

ADMIN = "admin-token-of-this-test"


def _config(replica, secret: str | None) -> ClusterConfig:
    me = NodeConfig(id="n1", raft=replica.self_raft, http="127.0.0.1:1", data_dir="/nonexistent")
    return ClusterConfig(name="t", nodes=(me,), secret=secret,
                         auth={"admin_token_sha256": [digest_of(ADMIN)]})


@pytest.fixture
async def signed(replica, aiohttp_client):
    """A node with [auth] and a cluster secret; its client."""
    cfg = _config(replica, "cluster-secret")
    node = Node(node_id="n1", config=cfg, replica=replica, clock=Clock())
    return await aiohttp_client(node_app(node)), cfg


async def test_a_peer_reads_the_members_with_a_signed_header_only(signed):
    client, cfg = signed
    now_ms = Clock().now_ms()
    headers = peer_headers(cfg, "n2", now_ms, "/v1/cluster/members")
    assert headers is not None and set(headers) == {PEER_HEADER}
    r = await client.get("/v1/cluster/members", headers=headers)
    body = await r.json()
    assert r.status == 200, body
    assert [m["id"] for m in body["members"]] == ["n1"] and body["leader"] == "n1"
    assert isinstance(body["config_index"], int) and body["config_index"] > 0, body
    assert (await client.get("/v1/cluster/members")).status == 401
    # Anything else is forbidden to it, even signed for that path.
    r = await client.get("/v1/tasks", headers=peer_headers(cfg, "n2", now_ms, "/v1/tasks"))
    assert r.status == 403 and (await r.json())["error"]["code"] == "forbidden"


@pytest.mark.parametrize("spoil", ["other secret", "stale", "other path", "garbled"])
async def test_a_forged_stale_or_garbled_peer_header_is_unauthenticated(signed, spoil):
    client, cfg = signed
    now_ms = Clock().now_ms()
    path = "/v1/cluster/members"
    if spoil == "other secret":
        headers = peer_headers(ClusterConfig(name="t", nodes=cfg.nodes, secret="guess",
                                             auth=cfg.auth), "n2", now_ms, path)
    elif spoil == "stale":
        headers = peer_headers(cfg, "n2", now_ms - (PEER_STAMP_SKEW_S + 5) * 1000, path)
    elif spoil == "other path":
        headers = peer_headers(cfg, "n2", now_ms, "/v1/cluster/self")
    else:
        headers = {PEER_HEADER: "n2:soon:nothing"}
    r = await client.get(path, headers=headers)
    assert r.status == 401 and (await r.json())["error"]["code"] == "unauthenticated"


def test_no_header_without_auth_and_none_can_be_signed_without_a_secret(replica):
    cfg = _config(replica, None)
    assert peer_headers(cfg, "n2", 0, "/v1/cluster/members") is None
    open_cfg = ClusterConfig(name="t", nodes=cfg.nodes, secret="s")
    assert peer_headers(open_cfg, "n2", 0, "/v1/cluster/members") is None


# --- the probe of a node that sees no leader ---------------------------------------------------

async def test_a_leaderless_node_asks_after_a_while_then_less_and_less_often(api, tmp_path,
                                                                            caplog):
    """n5 (a replica that never started: it sees no leader) asks n1, the single-node
    cluster of the `api` fixture, which lists itself alone at a committed index past n5's
    empty log: n5 was removed. Its rounds wait for NO_LEADER_ELECTIONS election timeouts,
    then back off; the WARNING is logged once."""
    from tsched.node.api.member_probe import NO_LEADER_ELECTIONS, MemberProbe
    from tsched.node.forwarding import Forwarder
    from tsched.node.raft.replica import Replica
    from tests.harness.raft_options import FAST
    server = api.client.server
    peer = NodeConfig(id="n1", raft=api.node.replica.self_raft,
                      http=f"{server.host}:{server.port}", data_dir="/nonexistent")
    me = NodeConfig(id="n5", raft="127.0.0.10:9", http="127.0.0.1:2", data_dir=str(tmp_path))
    lone = Replica(self_id="n5", self_raft=me.raft, peers={"n1": peer.raft}, data_dir=tmp_path,
                   options=FAST)
    node = Node(node_id="n5", config=ClusterConfig(name="t", nodes=(peer, me)), replica=lone,
                clock=Clock())
    node.forwarder = Forwarder("n5")
    await node.forwarder.start()
    try:
        probe = MemberProbe(node)
        patience_s = NO_LEADER_ELECTIONS * FAST.raft_max_timeout_s
        rounds_at = []
        p = patience_s     # each round waits twice as long as the one before
        for t in (0.0, p - 0.01, p, 2 * p - 0.01, 2 * p + 0.01, 4 * p, 4 * p + 0.02,
                  8 * p + 0.03):
            await probe.step(100.0 + t)
            rounds_at.append(probe.rounds)
        assert rounds_at == [0, 0, 1, 1, 2, 2, 3, 4], rounds_at
        reason = probe.removed_reason()
        assert reason is not None and reason.startswith(
            "this node is not a member of the cluster: n1 (whose leader is n1) lists the "
            "members n1 at Raft index"), reason
        warnings = [r for r in caplog.records if "event=removed_from_cluster" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].levelname == "WARNING", warnings
    finally:
        await node.forwarder.close()


def test_config_index_is_a_committed_index_the_members_hold_at(tmp_path):
    """`Membership.effect`: the applied index once the last change is applied; None while
    it is not, and while the log of before the start is replayed."""
    from tsched.node.raft.membership import Membership
    from tsched.node.raft.transport import DialNode
    n1 = Member("n1", "127.0.0.1:10001", "127.0.0.1:11001")
    m = Membership(tmp_path, n1, [])
    m.record_after_idx = 5                          # replaying up to 5
    m.refresh([], applied_idx=3, last_idx=9)
    assert m.effect.config_index is None and m.effect.last_idx == 9
    m.refresh([], applied_idx=6, last_idx=9)        # replayed: the start's members hold
    assert m.effect.config_index == 6
    n2 = DialNode("127.0.0.1:10002", None, name="n2", http="127.0.0.1:11002")
    m.refresh([n2], applied_idx=7, last_idx=10)     # a change enters the log at 10
    assert [x.id for x in m.effect.members] == ["n1", "n2"]
    assert m.effect.config_index is None            # not applied yet
    m.refresh([n2], applied_idx=10, last_idx=12)
    assert m.effect.config_index == 10 and m.effect.last_idx == 12
