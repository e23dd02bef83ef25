"""cluster.toml parsing: the defaults file, relative data dirs, and clear refusals."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tsched.node import config
from tsched.node.clock import Clock

ROOT = Path(__file__).resolve().parents[3]

GOOD = """
[cluster]
name = "t"

[[node]]
id = "a"
raft = "127.0.0.1:9001"
http = "127.0.0.1:9101"
data_dir = "d/a"

[[node]]
id = "b"
raft = "127.0.0.1:9002"
http = "127.0.0.1:9102"
data_dir = "/abs/b"
"""


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return str(p)


def test_repository_cluster_toml_has_three_loopback_nodes():
    cfg = config.load(str(ROOT / "cluster.toml"))
    assert [n.id for n in cfg.nodes] == ["n1", "n2", "n3"]
    assert [n.http for n in cfg.nodes] == [f"127.0.0.1:{p}" for p in (8701, 8702, 8703)]
    assert [n.raft for n in cfg.nodes] == [f"127.0.0.1:{p}" for p in (8801, 8802, 8803)]
    assert cfg.node("n2").data_dir == str(ROOT / ".tsched" / "data" / "n2")
    assert cfg.auth is None and cfg.secret is None


def test_data_dir_is_relative_to_the_file_and_peers_exclude_self(tmp_path):
    cfg = config.load(write(tmp_path, GOOD))
    assert cfg.node("a").data_dir == os.path.join(str(tmp_path), "d", "a")
    assert cfg.node("b").data_dir == "/abs/b"
    assert cfg.peers_of("a") == {"b": "127.0.0.1:9002"}
    assert cfg.node("a").http_port == 9101 and cfg.node("a").url == "http://127.0.0.1:9101"


def test_timeouts_auth_and_limits_tables_are_kept(tmp_path):
    text = GOOD.replace('name = "t"', 'name = "t"\nsecret = "s3"') + """
[cluster.timeouts]
raft_min_s = 0.5
[auth]
admin_token_sha256 = ["ab"]
[limits]
payload_bytes_max = 10
"""
    # [cluster.timeouts] must come right after [cluster]: TOML tables can appear anywhere.
    cfg = config.load(write(tmp_path, text))
    assert cfg.timeouts == {"raft_min_s": 0.5}
    assert cfg.secret == "s3"
    assert cfg.auth["admin_token_sha256"] == ["ab"]
    assert cfg.limits["payload_bytes_max"] == 10


@pytest.mark.parametrize("change, message", [
    (('name = "t"', ''), "name"),
    (('id = "b"', 'id = "a"'), "unique"),
    (('raft = "127.0.0.1:9002"', 'raft = "127.0.0.1"'), "host:port"),
    (('http = "127.0.0.1:9102"', 'http = "127.0.0.1:99999"'), "host:port"),
    (('raft = "127.0.0.1:9002"', 'raft = "10.0.0.2:9002"'), "secret"),
    (('data_dir = "/abs/b"', 'data_dir = "/abs/b"\ncolour = "red"'), "unknown"),
    (('id = "b"', 'id = "b c"'), "id"),
])
def test_bad_files_are_refused_with_a_clear_message(tmp_path, change, message):
    with pytest.raises(config.ConfigError, match=message):
        config.load(write(tmp_path, GOOD.replace(*change)))


def test_non_loopback_raft_is_allowed_with_a_secret(tmp_path):
    text = GOOD.replace('name = "t"', 'name = "t"\nsecret = "x"').replace(
        "127.0.0.1:9002", "10.0.0.2:9002")
    assert config.load(write(tmp_path, text)).node("b").raft == "10.0.0.2:9002"


def test_missing_file_unknown_node_and_bad_toml(tmp_path):
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load(str(tmp_path / "nope.toml"))
    with pytest.raises(config.ConfigError, match="not valid TOML"):
        config.load(write(tmp_path, "[cluster"))
    with pytest.raises(config.ConfigError, match="not in the cluster"):
        config.load(write(tmp_path, GOOD)).node("zz")
    with pytest.raises(config.ConfigError, match="timeouts"):
        config.load(write(tmp_path, GOOD + "\n[cluster.timeouts]\nbogus = 1\n"))


def test_clock_offset_from_environment():
    assert Clock.from_env({}).offset_ms == 0
    skewed = Clock.from_env({"TSCHED_CLOCK_OFFSET_MS": "-5000"})
    assert skewed.offset_ms == -5000
    assert abs((Clock().now_ms() - 5000) - skewed.now_ms()) < 1000
    with pytest.raises(ValueError, match="TSCHED_CLOCK_OFFSET_MS"):
        Clock.from_env({"TSCHED_CLOCK_OFFSET_MS": "soon"})


def test_tsnode_refuses_public_http_without_auth(tmp_path):
    from click.testing import CliRunner

    from tsched.node.main import cli
    path = write(tmp_path, GOOD.replace('http = "127.0.0.1:9101"', 'http = "0.0.0.0:9101"'))
    result = CliRunner().invoke(cli, ["--config", path, "--id", "a"])
    assert result.exit_code == 2
    assert "non-loopback" in result.output and "[auth]" in result.output


def test_tsnode_refuses_unknown_node_and_bad_file(tmp_path):
    from click.testing import CliRunner

    from tsched.node.main import cli
    result = CliRunner().invoke(cli, ["--config", write(tmp_path, GOOD), "--id", "zz"])
    assert result.exit_code == 2 and "not in the cluster" in result.output
    result = CliRunner().invoke(cli, ["--config", str(tmp_path / "none.toml"), "--id", "a"])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_log_lines_carry_node_and_term_in_both_formats(capsys):
    import json
    import logging

    from tsched.node.ops.log_format import setup_logging
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        ctx = setup_logging("n7", "json")
        ctx.term_of = lambda: 4
        logging.getLogger("tsched.node").info("event=test_line x=%d", 1)
        line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
        assert line["node"] == "n7" and line["term"] == 4 and line["msg"] == "event=test_line x=1"
        setup_logging("n8", "text").term_of = lambda: 2
        logging.getLogger("tsched.node").info("event=other")
        text = capsys.readouterr().err.strip().splitlines()[-1]
        assert "node=n8 term=2 event=other" in text and text[:4].isdigit()
    finally:
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])


def test_compaction_thresholds_reach_the_raft_options(tmp_path):
    from tsched.node.raft.replica import Replica
    cfg = config.load(write(tmp_path, GOOD + "\n[cluster.compaction]\nmin_entries = 50\n"
                                              "min_time_s = 30\nmin_bytes = 1048576\n"))
    assert dict(cfg.compaction) == {"min_entries": 50, "min_time_s": 30, "min_bytes": 1 << 20}
    replica = Replica.from_config(cfg, "a")
    assert replica.options.compaction_min_entries == 50
    assert replica.options.compaction_min_time_s == 30.0
    assert replica.options.compaction_min_bytes == 1 << 20


@pytest.mark.parametrize("table, match", [
    ("min_entries = 1", "min_entries"),
    ("min_time_s = true", "min_time_s"),
    ("min_bytes = 10", "min_bytes"),
    ("every = 5", "unknown key"),
])
def test_bad_compaction_settings_are_refused(tmp_path, table, match):
    with pytest.raises(config.ConfigError, match=match):
        config.load(write(tmp_path, GOOD + f"\n[cluster.compaction]\n{table}\n"))


def test_limits_request_window_s_is_the_state_machines_request_window_ms(tmp_path):
    from tsched.statemachine import Limits
    cfg = config.load(write(tmp_path, GOOD + "[limits]\nrequest_window_s = 300\n"))
    assert dict(cfg.limits) == {"request_window_ms": 300_000}
    assert Limits(**cfg.limits).request_window_ms == 300_000
    assert Limits().request_window_ms == 120_000    # no key: the default
    for bad in ("10", "true", '"120"', "100000"):
        with pytest.raises(config.ConfigError, match="request_window_s"):
            config.load(write(tmp_path, GOOD + f"[limits]\nrequest_window_s = {bad}\n"))


def test_limits_list_budget_is_the_nodes_not_the_state_machines(tmp_path):
    """`[limits] list_pages_per_s` / `list_burst_pages` (node/api/read_budget.py) are kept
    on the config and taken out of the state machine's limits; absent, the defaults."""
    from tsched.statemachine.limits import API_LIMITS
    plain = config.load(write(tmp_path, GOOD))
    assert (plain.list_pages_per_s, plain.list_burst_pages) == (
        API_LIMITS.list_pages_per_s, API_LIMITS.list_burst_pages)
    cfg = config.load(write(tmp_path, GOOD + "[limits]\nlist_pages_per_s = 5\n"
                                             "list_burst_pages = 2\nlive_tasks_max = 10\n"))
    assert (cfg.list_pages_per_s, cfg.list_burst_pages) == (5, 2)
    assert dict(cfg.limits) == {"live_tasks_max": 10}
    off = config.load(write(tmp_path, GOOD + "[limits]\nlist_pages_per_s = 0\n"))
    assert off.list_pages_per_s == 0 and not off.limits
    for key, bad in (("list_pages_per_s", "-1"), ("list_pages_per_s", "0.5"),
                     ("list_pages_per_s", "true"), ("list_burst_pages", "0"),
                     ("list_burst_pages", "1000001")):
        with pytest.raises(config.ConfigError, match=key):
            config.load(write(tmp_path, GOOD + f"[limits]\n{key} = {bad}\n"))


def test_priority_tiers_default_to_the_designs_five_and_may_be_set(tmp_path):
    from tsched.statemachine.tiers import DEFAULT_TIERS
    base = {"cluster": {"name": "c"},
            "node": [{"id": "n1", "raft": "127.0.0.1:7001", "http": "127.0.0.1:8001",
                      "data_dir": "d1"}]}
    assert config.parse(base, base_dir=str(tmp_path)).tiers == DEFAULT_TIERS
    two = {**base, "priority": {"tiers": [{"name": "now", "min": 0, "max": 1, "sla_s": 1},
                                          {"name": "later", "min": 2, "max": 10}]}}
    assert [t.name for t in config.parse(two, base_dir=str(tmp_path)).tiers] == ["now",
                                                                                "later"]
    gap = {**base, "priority": {"tiers": [{"name": "now", "min": 0, "max": 1}]}}
    with pytest.raises(config.ConfigError, match="end at 10"):
        config.parse(gap, base_dir=str(tmp_path))
    with pytest.raises(config.ConfigError, match=r"\[priority\]"):
        config.parse({**base, "priority": {"weights": 1}}, base_dir=str(tmp_path))


def test_a_file_without_archive_archives_under_data_dir_for_a_year(tmp_path):
    cfg = config.load(write(tmp_path, GOOD))
    assert cfg.archive_dir == "archive" and cfg.archive_keep_days == 365
    repo = config.load(str(ROOT / "cluster.toml"))
    assert repo.archive_dir == "archive"
    off = config.load(write(tmp_path, GOOD + "\n[archive]\nenabled = false\n"))
    assert off.archive_dir is None
    kept = config.load(write(tmp_path, GOOD + '\n[archive]\ndir = "/srv/a"\nkeep_days = 2555\n'))
    assert kept.archive_dir == "/srv/a" and kept.archive_keep_days == 2555


@pytest.mark.parametrize("table, match", [
    ("keep_days = 0", "keep_days"), ("keep_days = 40000", "keep_days"),
    ("keep_days = 1.5", "keep_days"), ("keep_days = true", "keep_days"),
    ('enabled = "no"', "enabled"), ('dir = ""', "dir"), ("days = 3", "unknown keys")])
def test_bad_archive_settings_are_refused(tmp_path, table, match):
    with pytest.raises(config.ConfigError, match=match):
        config.load(write(tmp_path, GOOD + f"\n[archive]\n{table}\n"))
