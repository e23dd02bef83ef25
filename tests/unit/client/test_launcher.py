"""The product's local-cluster launcher (tsched.client.launcher): ports, the cluster file,
and `Nodes` with a stand-in for `tsnode` (a small Python script), plus `tsctl dev` when
every node exits at once."""
from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from tests.harness.waits import wait_until
from tsched.client import launcher
from tsched.client.cli import cli
from tsched.client.launcher import LaunchError, Nodes, cluster_toml, leader_of, wait_leader

# A stand-in node: says its arguments, then waits for a signal (SIGTERM: exit 0; with
# "stubborn" among its arguments it ignores SIGTERM).
FAKE_NODE = r"""
import signal, sys, time
if "stubborn" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("args", *sys.argv[1:], flush=True)
while True:
    signal.pause()
"""


def fake_nodes(tmp_path: Path) -> Nodes:
    return Nodes(tmp_path / "logs", [sys.executable, "-c", FAKE_NODE], cwd=tmp_path)


def said(nodes: Nodes, node_id: str) -> int:
    path = nodes.log_path(node_id)
    return path.read_text().count("args") if path.exists() else 0


def started(nodes: Nodes, node_id: str, *args: str) -> None:
    """Start a stand-in node and wait until it has set its SIGTERM handler."""
    before = said(nodes, node_id)
    nodes.start(node_id, "c.toml", *args)
    wait_until(lambda: said(nodes, node_id) > before, 10, f"{node_id} up")


def test_cluster_toml_lists_every_node_in_order() -> None:
    text = cluster_toml("x", {"n1": "h:1", "n2": "h:2"}, {"n1": "h:3", "n2": "h:4"},
                        {"n1": "d/1", "n2": "d/2"}, shards=2, secret="s", extra_toml="[a]\n")
    assert text.startswith('[cluster]\nname = "x"\nshards = 2\nsecret = "s"\n\n[[node]]\n'
                           'id = "n1"\nraft = "h:1"\nhttp = "h:3"\ndata_dir = "d/1"\n')
    assert text.index('id = "n1"') < text.index('id = "n2"') and text.endswith("\n[a]\n")


def test_a_cluster_s_block_is_below_the_ephemeral_range_and_within_the_bases() -> None:
    raft, http = launcher.node_addresses(["a", "b", "c"], 2, bases=(20_000, 20_500))
    rafts = [int(a.rsplit(":", 1)[1]) for a in raft.values()]
    https = [int(a.rsplit(":", 1)[1]) for a in http.values()]
    assert 20_000 <= rafts[0] <= 20_500 and rafts == [rafts[0] + k for k in range(3)]
    assert https == [rafts[0] + 200 + k for k in range(3)]
    assert len(set(launcher.free_ports(20))) == 20


def test_nodes_start_each_with_its_log_and_stop_on_sigterm(tmp_path: Path) -> None:
    nodes = fake_nodes(tmp_path)
    try:
        started(nodes, "n1", "--extra")
        assert "args --config c.toml --id n1 --extra" in nodes.log_path("n1").read_text()
        with pytest.raises(LaunchError):
            nodes.start("n1", "c.toml")         # one process per node at a time
        assert nodes.alive("n1") and nodes.exited() == []
        assert nodes.stop("n1") == 0
        assert nodes.exited() == ["n1"] and not nodes.alive("n1")
        started(nodes, "n1")                    # a restart appends to the same log
        assert said(nodes, "n1") == 2
        nodes.kill("n1")
        assert nodes.procs["n1"].returncode == -signal.SIGKILL
    finally:
        nodes.close()


def test_stop_all_kills_a_node_that_ignores_sigterm(tmp_path: Path) -> None:
    nodes = fake_nodes(tmp_path)
    try:
        started(nodes, "n1")
        started(nodes, "n2", "stubborn")
        nodes.stop_all(timeout_s=0.5)
        assert nodes.procs["n1"].returncode == 0
        assert nodes.procs["n2"].returncode == -signal.SIGKILL
        started(nodes, "n3", "stubborn")
        with pytest.raises(LaunchError, match="n3 did not stop"):
            nodes.stop("n3", timeout_s=0.3)
        assert not nodes.alive("n3")
    finally:
        nodes.close()


def test_close_kills_whatever_runs(tmp_path: Path) -> None:
    nodes = fake_nodes(tmp_path)
    started(nodes, "n1", "stubborn")
    nodes.close()
    assert nodes.procs["n1"].returncode == -signal.SIGKILL


# A stand-in node whose main process exits at once, leaving a child in its process group
# (as a sharded node's shard processes are): the child says its pid, then waits.
LEAVES_A_CHILD = r"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import os, signal; print('child', os.getpid(), flush=True); signal.pause()"])
"""


def test_close_kills_what_nodes_left_in_their_groups_after_their_main_processes_exited(
        tmp_path: Path) -> None:
    """Also for a node started again under the same id: the first start's group too."""
    nodes = Nodes(tmp_path / "logs", [sys.executable, "-c", LEAVES_A_CHILD], cwd=tmp_path)
    groups = []
    for start in (1, 2):
        proc = nodes.start("n1", tmp_path / "cluster.toml")
        proc.wait(timeout=30)
        wait_until(lambda n=start: nodes.log_path("n1").read_text().count("child") == n, 30,
                   "the child's pid")
        groups.append(proc.pid)
    children = [int(x.split()[0]) for x in nodes.log_path("n1").read_text().split("child")[1:]]
    assert all(g in launcher._live_groups() for g in groups)
    nodes.close()
    # the children's parents have exited, so init reaps them once they are killed
    wait_until(lambda: not any(Path(f"/proc/{c}").exists() for c in children), 30,
               "the children gone")
    assert not any(g in launcher._live_groups() for g in groups)


def test_close_kills_a_node_that_has_no_process_group_of_its_own_yet(tmp_path: Path) -> None:
    """A node forked a moment ago may not have made its own session yet (a zygote's child
    calls setsid first thing): close kills the process itself."""
    import subprocess
    nodes = fake_nodes(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
    try:
        nodes.started.append((child.pid, launcher._started_at(child.pid)))
        nodes.close()
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        child.kill()


def test_close_leaves_alone_a_process_that_was_given_a_node_s_old_number() -> None:
    """A node that exited long ago may have its pid given to another process since: close
    must not kill that one, told apart by its start time."""
    import os
    me = os.getpid()
    assert launcher._ours_and_running(me, launcher._started_at(me), launcher._live_groups())
    assert not launcher._ours_and_running(me, launcher._started_at(me) - 1,
                                        launcher._live_groups())


def test_the_leader_is_named_once_every_shard_has_one() -> None:
    docs = iter([{"leader": "n1", "shards": [{"leader": "n1"}, {"leader": None}]},
                 {"leader": "n1", "shards": [{"leader": "n1"}, {"leader": "n2"}]}])
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=next(docs)))
    with httpx.Client(transport=transport) as http:
        assert leader_of(http, "http://n") is None
        assert leader_of(http, "http://n") == "n1"
    assert leader_of(httpx.Client(), "http://127.0.0.1:9") is None


def test_waiting_for_a_leader_ends_when_every_node_exits_or_when_told(tmp_path: Path) -> None:
    nodes = Nodes(tmp_path, [sys.executable, "-c", "raise SystemExit(3)"])
    nodes.start("n1", "c.toml")
    with pytest.raises(LaunchError, match="every node exited"):
        wait_leader(nodes, ["http://127.0.0.1:9"], timeout_s=30, poll_s=0.05)
    told = threading.Event()
    told.set()
    assert wait_leader(nodes, [], timeout_s=30, stop=told) is None


def test_dev_says_so_when_every_node_exits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setattr(launcher, "NODE_COMMAND", (sys.executable, "-c", "raise SystemExit(3)"))
    (tmp_path / "cluster.toml").write_text(cluster_toml(
        "t", {"n1": "127.0.0.1:9"}, {"n1": "127.0.0.1:9"}, {"n1": "data/n1"}))
    result = CliRunner().invoke(cli, ["dev", "--config", str(tmp_path / "cluster.toml")])
    assert result.exit_code == 1, result.output
    assert "every node exited; see" in result.output and "stopped every node." in result.output
    assert (tmp_path / ".tsched" / "logs" / "n1.log").is_file()


def test_the_cluster_file_of_some_nodes_or_all(tmp_path: Path) -> None:
    raft, http = {"n1": "h:1", "n2": "h:2"}, {"n1": "h:3", "n2": "h:4"}
    path = launcher.write_cluster_file(tmp_path / "c.toml", "x", raft, http, shards=2)
    assert path.read_text() == cluster_toml("x", raft, http, {"n1": "data/n1", "n2": "data/n2"},
                                            shards=2)
    one = launcher.write_cluster_file(tmp_path / "n2.toml", "x", raft, http, "/d/{id}-x",
                                      ids=["n2"], extra_toml="[a]\n")
    assert one.read_text() == cluster_toml("x", {"n2": "h:2"}, {"n2": "h:4"},
                                           {"n2": "/d/n2-x"}, extra_toml="[a]\n")
