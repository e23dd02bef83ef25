"""The membership a node recorded beside its log against its config's [[node]] list at
start (DESIGN 6.2): agreeing lists start, a file with only this node takes the recorded
members, any other disagreement stops the node naming both lists, and a removed node never
starts with its old data."""
from __future__ import annotations

import pytest

from tsched.node.raft import join_group as join
from tsched.node.config import ClusterConfig, ConfigError, NodeConfig
from tsched.node.raft.membership import Member, read_members
from tsched.node.raft.membership import write_members as _write


def _cfg(tmp_path, *ids: str) -> ClusterConfig:
    nodes = tuple(NodeConfig(id=i, raft=f"127.0.0.1:{7000 + n}", http=f"127.0.0.1:{8000 + n}",
                             data_dir=str(tmp_path / i)) for n, i in enumerate(ids))
    return ClusterConfig(name="t", nodes=nodes)


def write_members(data_dir, members) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    _write(data_dir, members)


def _members(*ids: str) -> list[Member]:
    return [Member(i, f"127.0.0.1:{7000 + n}", f"127.0.0.1:{8000 + n}") for n, i in enumerate(ids)]


def test_the_members_file_round_trips_and_a_missing_one_is_none(tmp_path):
    assert read_members(tmp_path) is None
    write_members(tmp_path, reversed(_members("n1", "n2", "n3")))
    assert read_members(tmp_path) == _members("n1", "n2", "n3")
    (tmp_path / "members.json").write_text("{")
    with pytest.raises(ValueError, match="unreadable"):
        read_members(tmp_path)


def test_no_recorded_membership_keeps_the_config(tmp_path):
    cfg = _cfg(tmp_path, "n1", "n2", "n3")
    assert join.effective_config(cfg, cfg.nodes[0]) is cfg


def test_an_agreeing_config_starts(tmp_path):
    cfg = _cfg(tmp_path, "n1", "n2", "n3")
    write_members(tmp_path / "n1", _members("n1", "n2", "n3"))
    got = join.effective_config(cfg, cfg.nodes[0])
    assert [n.id for n in got.nodes] == ["n1", "n2", "n3"]
    assert got.nodes[0].data_dir == cfg.nodes[0].data_dir


def test_a_file_with_only_this_node_takes_the_recorded_members(tmp_path):
    cfg = _cfg(tmp_path, "n1")
    write_members(tmp_path / "n1", _members("n1", "n2", "n3", "n4"))
    got = join.effective_config(cfg, cfg.nodes[0])
    assert [(n.id, n.http) for n in got.nodes] == [(m.id, m.http) for m in _members(
        "n1", "n2", "n3", "n4")]
    assert got.nodes[0] == cfg.nodes[0]      # its own data dir and certificate


def test_a_disagreeing_config_stops_naming_both_lists(tmp_path):
    cfg = _cfg(tmp_path, "n1", "n2", "n3")
    write_members(tmp_path / "n1", _members("n1", "n2", "n3", "n4", "n5"))
    with pytest.raises(ConfigError) as e:
        join.effective_config(cfg, cfg.nodes[0])
    text = str(e.value)
    assert "disagrees" in text and "n5 (raft 127.0.0.1:7004" in text
    assert text.index("n3") < text.index("n4")     # the config's list, then the recorded


def test_a_file_one_change_apart_starts_with_the_recorded_members(tmp_path, caplog):
    """A node that was down while a member was added (its file already updated), or a file
    not updated yet after a change: one member apart, as Raft's one change at a time."""
    cfg = _cfg(tmp_path, "n1", "n2", "n3", "n4")
    write_members(tmp_path / "n1", _members("n1", "n2", "n3"))
    got = join.effective_config(cfg, cfg.nodes[0])
    assert [n.id for n in got.nodes] == ["n1", "n2", "n3"]
    assert "members_file_one_change_apart" in caplog.text
    cfg = _cfg(tmp_path, "n1", "n2", "n3")
    write_members(tmp_path / "n1", _members("n1", "n2", "n3", "n4"))
    assert [n.id for n in join.effective_config(cfg, cfg.nodes[0]).nodes] == [
        "n1", "n2", "n3", "n4"]


def test_a_removed_node_never_starts_with_its_old_data(tmp_path):
    cfg = _cfg(tmp_path, "n1", "n2", "n3")
    write_members(tmp_path / "n1", _members("n0", "n2", "n3")[1:] + [Member("n4", "h:1", "h:2")])
    with pytest.raises(ConfigError, match="not a member.*removed"):
        join.effective_config(cfg, cfg.nodes[0])


def test_moved_addresses_of_this_node_are_refused(tmp_path):
    cfg = _cfg(tmp_path, "n1", "n2", "n3")
    write_members(tmp_path / "n1", [Member("n1", "127.0.0.1:1", "127.0.0.1:2"),
                                    *_members("n1", "n2", "n3")[1:]])
    with pytest.raises(ConfigError, match="the config gives raft"):
        join.effective_config(cfg, cfg.nodes[0])


def _shard_cfg(tmp_path, *ids: str) -> ClusterConfig:
    """A shard replica's view: its group's nodes at the shard's Raft ports, each at its
    internal HTTP address (Raft + 50), its node's public API as `api`."""
    nodes = tuple(NodeConfig(id=i, raft=f"127.0.0.1:{7100 + n}", http=f"127.0.0.1:{7150 + n}",
                             data_dir=str(tmp_path / i), api=f"127.0.0.1:{8000 + n}")
                  for n, i in enumerate(ids))
    return ClusterConfig(name="t", nodes=nodes)


def _group(*ids: str) -> list[Member]:
    """A shard group's members as recorded: shard Raft ports, the nodes' public APIs."""
    return [Member(i, f"127.0.0.1:{7100 + n}", f"127.0.0.1:{8000 + n}")
            for n, i in enumerate(ids)]


def test_a_shard_group_compares_by_raft_address_and_reaches_replicas_inside(tmp_path):
    cfg = _shard_cfg(tmp_path, "n1", "n2", "n3")
    write_members(tmp_path / "n1", _group("n1", "n2", "n3", "n4"))   # n4 joined
    got = join.effective_config(cfg, cfg.nodes[0], sharded=True)
    n4 = got.node("n4")
    assert (n4.raft, n4.http, n4.api) == ("127.0.0.1:7103", "127.0.0.1:7153", "127.0.0.1:8003")
    assert got.nodes[0] == cfg.nodes[0]
    write_members(tmp_path / "n1", [Member("n1", "127.0.0.1:7999", "127.0.0.1:8000"),
                                    *_group("n1", "n2", "n3")[1:]])
    with pytest.raises(ConfigError, match="raft 127.0.0.1:7999"):
        join.effective_config(cfg, cfg.nodes[0], sharded=True)
    write_members(tmp_path / "n1", _group("n1", "n2", "n3", "n4", "n5"))
    with pytest.raises(ConfigError, match="disagrees"):
        join.effective_config(cfg, cfg.nodes[0], sharded=True)
