"""Shard configuration: the values, placement, ports, data layout and routing math
(DESIGN.md section 13)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tsched.node import config
from tsched.node import topology as shards
from tsched.node import config as shape


def cluster_toml(tmp_path: Path, nodes: int = 3, extra: str = "") -> str:
    text = f'[cluster]\nname = "t"\n{extra}\n'
    for i in range(nodes):
        text += (f'[[node]]\nid = "n{i + 1}"\nraft = "127.0.0.1:{9801 + i}"\n'
                 f'http = "127.0.0.1:{9701 + i}"\ndata_dir = "d/n{i + 1}"\n')
    p = tmp_path / "c.toml"
    p.write_text(text)
    return str(p)


def load(tmp_path: Path, nodes: int = 3, extra: str = "") -> config.ClusterConfig:
    return config.load(cluster_toml(tmp_path, nodes, extra))


def test_defaults_are_one_shard_on_every_node(tmp_path):
    cfg = load(tmp_path, nodes=3)
    assert (cfg.shards, shards.replicas_of(cfg)) == (1, 3)
    assert shards.is_single_group(cfg)
    seven = load(tmp_path, nodes=7)
    assert shards.replicas_of(seven) == 7     # a single group keeps every node, as before
    assert shards.is_single_group(seven)


def test_several_shards_default_to_at_most_five_replicas(tmp_path):
    cfg = load(tmp_path, nodes=7, extra="shards = 4")
    assert shards.replicas_of(cfg) == 5
    assert not shards.is_single_group(cfg)


@pytest.mark.parametrize("line, field", [("shards = 0", "shards"), ("shards = 65", "shards"),
                                         ("shards = true", "shards"), ('shards = "2"', "shards"),
                                         ("replicas = 4", "replicas"),
                                         ("replicas = 1", "replicas"),
                                         ("shards = 2\nreplicas = 5", "replicas")])
def test_out_of_range_values_are_refused_naming_the_field(tmp_path, line, field):
    with pytest.raises(config.ConfigError, match=rf"\[cluster\] {field}"):
        load(tmp_path, nodes=3, extra=line)


def test_placement_starts_at_shard_mod_n_in_config_order_and_wraps(tmp_path):
    cfg = load(tmp_path, nodes=5, extra="shards = 7\nreplicas = 3")
    ids = lambda s: [n.id for n in shards.placement(cfg, s)]  # noqa: E731
    assert ids(0) == ["n1", "n2", "n3"]
    assert ids(3) == ["n4", "n5", "n1"]
    assert ids(6) == ["n2", "n3", "n4"]
    assert shards.local_shards(cfg, "n1") == [0, 3, 4, 5]


def test_shard_ports_and_data_dirs(tmp_path):
    cfg = load(tmp_path, nodes=3, extra="shards = 4")
    sub = shards.shard_config(cfg, 2)
    n2 = sub.node("n2")
    assert n2.raft == "127.0.0.1:10002" and n2.http == "127.0.0.1:10052"
    assert n2.data_dir == str(tmp_path / "d" / "n2" / "shard-2")
    assert (sub.shards, sub.replicas) == (1, 3)
    single = load(tmp_path, nodes=3)
    assert shards.shard_config(single, 0).node("n1").data_dir == str(tmp_path / "d" / "n1")
    assert shards.shard_config(single, 0).node("n1").raft == "127.0.0.1:9801"


def test_a_shard_port_beyond_65535_is_a_start_up_error(tmp_path):
    text = Path(cluster_toml(tmp_path, extra="shards = 64")).read_text().replace("9801", "60001")
    with pytest.raises(config.ConfigError, match="shards = 64.*above 65535"):
        config.load(write_text(tmp_path, text))


def test_colliding_shard_ports_are_refused(tmp_path):
    # base ports 100 apart: n2's base is n1's shard 1
    text = Path(cluster_toml(tmp_path, extra="shards = 2")).read_text().replace("9802", "9901")
    with pytest.raises(config.ConfigError, match="9901 is also"):
        config.load(write_text(tmp_path, text))


def write_text(tmp_path: Path, text: str) -> str:
    p = tmp_path / "c2.toml"
    p.write_text(text)
    return str(p)


def test_tenant_hash_is_blake2b_of_the_utf8_name_mod_s():
    want = int.from_bytes(hashlib.blake2b("acmé".encode(), digest_size=8).digest(), "big") % 7
    assert shards.shard_of_tenant("acmé", 7) == want
    spread = {shards.shard_of_tenant(f"t{i}", 4) for i in range(64)}
    assert spread == {0, 1, 2, 3}


def test_task_ids_carry_their_shard():
    tid = shards.task_id_in(42, "f" * 32)
    assert tid == "2a" + "f" * 30
    assert shards.shard_of_task_id(tid, 64) == 42
    assert shards.shard_of_task_id(tid, 4) == -1          # a shard that does not exist
    assert shards.shard_of_task_id("zz" + "0" * 30, 4) is None


def test_cron_occurrence_ids_carry_their_shard_and_old_ones_none():
    from tsched.statemachine.rules import occurrence_task_id
    assert shards.shard_of_task_id(occurrence_task_id("t", "s", 1, False, 3), 4) == 3
    assert shards.shard_of_task_id(occurrence_task_id("t", "s", 1, False, 9), 4) == -1
    assert shards.shard_of_task_id(occurrence_task_id("t", "s", 1, False), 4) is None
    assert shards.shard_of_task_id("s-" + "0" * 30, 4) is None
    assert shards.shard_of_task_id("sxy-" + "0" * 32, 4) is None


def test_a_shard_timer_fires_with_its_shard():
    from tsched.node.scheduling import firing
    from tsched.statemachine import StateMachine, commands as c
    sm = StateMachine()
    sm.apply(c.PutSchedule(request_id="p", now_ms=1_000, tenant="t", schedule_id="s",
                           cron="* * * * *", timezone="UTC",
                           template=c.TaskTemplate(task_type="x"), next_fire_ms=60_000))
    fires = firing.due_fire_commands(sm, 60_000, shard=5)
    assert fires and {f.shard for f in fires} == {5}
    assert {f.shard for f in firing.due_fire_commands(sm, 60_000)} == {None}


# --- the data dir's shape --------------------------------------------------------------------

def test_a_data_dir_remembers_its_shape_and_refuses_another(tmp_path):
    four = load(tmp_path, extra="shards = 4")
    node = four.node("n1")
    shards.check_data_dir(four, node)            # empty: fine
    shards.stamp_data_dir(four, node)
    shards.check_data_dir(four, node)            # same values: fine
    two = load(tmp_path, extra="shards = 2")
    with pytest.raises(config.ConfigError, match=r"shards = 4 \(the config says shards = 2\)"):
        shards.check_data_dir(two, two.node("n1"))
    single = load(tmp_path)
    with pytest.raises(config.ConfigError, match="shards = 4"):
        shards.check_data_dir(single, single.node("n1"))


def test_a_single_group_data_dir_is_refused_by_a_sharded_config_and_left_alone(tmp_path):
    single = load(tmp_path)
    data = Path(single.node("n1").data_dir)
    (data / "raft-log").mkdir(parents=True)
    shards.stamp_data_dir(single, single.node("n1"))
    assert sorted(p.name for p in data.iterdir()) == ["raft-log"]   # layout unchanged
    shards.check_data_dir(single, single.node("n1"))
    four = load(tmp_path, extra="shards = 4")
    with pytest.raises(config.ConfigError, match=r"shards = 1 \(the config says shards = 4\)"):
        shards.check_data_dir(four, four.node("n1"))
    assert sorted(p.name for p in data.iterdir()) == ["raft-log"]   # nothing touched


# --- leader spread ---------------------------------------------------------------------------

def test_an_overloaded_node_moves_one_shard_to_the_replica_leading_fewest():
    from tsched.node.shards.leader_spread import plan_move
    replicas = {s: ["n1", "n2", "n3"] for s in range(4)}
    leaders = {0: "n1", 1: "n1", 2: "n1", 3: "n2"}
    assert plan_move("n1", leaders, replicas, 4, 3) == (0, "n3")
    assert plan_move("n2", leaders, replicas, 4, 3) is None        # n2 is within its share
    assert plan_move("n1", {0: "n1", 1: "n1", 2: "n2", 3: "n3"}, replicas, 4, 3) is None
    assert plan_move("n1", {0: "n1", 1: "n1", 2: "n1", 3: None}, replicas, 4, 3) is None


def test_a_spreader_moves_only_after_two_checks_over_the_share():
    from tsched.node.shards.leader_spread import Spreader
    sp = Spreader("n1", 3, 3, {s: ["n1", "n2", "n3"] for s in range(3)})
    for s in range(3):
        sp.note(s, b'{"role": "leader", "leader": "n1", "term": 2}\n')
    sp.note(0, b"not a status line\n")
    assert sp.check() is None
    assert sp.check() == (0, "n2")
    sp.forget(2)
    assert sp.check() is None      # a shard without status: not stable


def test_claims_go_to_the_leaders_replica_first_and_other_requests_stay_local(tmp_path):
    from tsched.node.shards.leader_spread import Spreader
    from tsched.node.shards.upstream import Upstreams
    cfg = load(tmp_path, nodes=3, extra="shards = 2")
    up = Upstreams(cfg, "n1")
    spreader = Spreader("n1", 2, 3, {0: ["n1", "n2", "n3"], 1: ["n2", "n3", "n1"]})
    up.leader_of = spreader.leader_of
    local = up.urls[1]
    assert local[0] == up.url_of[1]["n1"]                       # this node's replica first
    assert up._order(1, to_leader=True) == local                # no leader known yet
    spreader.note(1, b'{"role": "other", "leader": "n3", "term": 4}')
    by_leader = up._order(1, to_leader=True)
    assert by_leader[0] == up.url_of[1]["n3"] and sorted(by_leader) == sorted(local)
    assert up._order(1, to_leader=False) == local
    spreader.note(1, b'{"role": "other", "leader": "n9", "term": 5}')   # not a replica
    assert up._order(1, to_leader=True) == local
    # readiness asks this node's own replica alone
    assert up._order(1, to_leader=False, local_only=True) == [up.url_of[1]["n1"]]


def test_a_node_count_changed_by_membership_keeps_a_full_placement_data_dir(tmp_path):
    """Every node holds every shard: a node count changed by a membership change (DESIGN
    6.2) places nothing elsewhere, so a data dir holding every shard starts; one missing a
    shard, or a partial placement, is refused."""
    three = load(tmp_path, nodes=3, extra="shards = 2")
    node = three.node("n1")
    shards.stamp_data_dir(three, node)
    four = load(tmp_path, nodes=4, extra="shards = 2")
    with pytest.raises(config.ConfigError, match=r"replicas = 3 \(the config says replicas = 4\)"):
        shards.check_data_dir(four, four.node("n1"))      # no data of shard 1 here
    for s in range(2):
        Path(shards.shard_data_dir(three, node, s)).mkdir(parents=True)
    shards.check_data_dir(four, four.node("n1"))
    partial = load(tmp_path, nodes=4, extra="shards = 2\nreplicas = 3")
    assert not shape.is_full_placement(partial)
    shards.check_data_dir(partial, partial.node("n1"))    # the same shape: 2 and 3
    with pytest.raises(config.ConfigError):
        shards.check_data_dir(load(tmp_path, nodes=3, extra="shards = 3"), node)


def test_a_shard_replicas_internal_address_follows_from_its_raft_address(tmp_path):
    cfg = load(tmp_path, nodes=3, extra="shards = 3")
    for n in cfg.nodes:
        for s in range(3):
            sub = shards.shard_config(cfg, s).node(n.id)
            assert shape.internal_http(sub.raft) == sub.http
            assert sub.api == n.http         # what the group's membership records
