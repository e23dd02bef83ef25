"""Nodes forked from zygotes (tsched.client.forked, tsched.node.zygote) answer as the
`subprocess.Popen` they replace: the same exit codes, signals, waits, log and folder, and a
hash seed per node id."""
from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.harness.waits import wait_until
from tsched.client import forked
from tsched.client.forked import Zygotes
from tsched.client import launcher
from tsched.client.launcher import Nodes


@pytest.fixture
def zygotes():
    z = Zygotes()
    yield z
    z.close()


def hash_seed(pid: int) -> str:
    """The seed the process was started with (a forked child keeps its zygote's)."""
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(e for e in env if e.startswith(b"PYTHONHASHSEED=")).decode()


def test_a_forked_node_exits_as_a_started_one_would(tmp_path, zygotes) -> None:
    """A missing config: the same exit status and message, forked or started."""
    plain = Nodes(tmp_path / "plain", cwd=tmp_path)
    forked = Nodes(tmp_path / "forked", cwd=tmp_path, zygotes=zygotes)
    codes = [n.start("n1", "missing.toml").wait(timeout=30) for n in (plain, forked)]
    assert codes[0] == codes[1] != 0, codes
    logs = [n.log_path("n1").read_text() for n in (plain, forked)]
    assert "missing.toml" in logs[1] and logs[0].splitlines()[-1] == logs[1].splitlines()[-1]


def test_a_forked_node_takes_its_environment_and_is_signalled_and_waited(tmp_path,
                                                                         zygotes) -> None:
    raft, http = launcher.node_addresses(["n1"], 1)
    config = launcher.write_cluster_file(tmp_path / "c.toml", "z", raft, http, ids=["n1"])
    nodes = Nodes(tmp_path / "logs", cwd=tmp_path, zygotes=zygotes)
    refused = nodes.start("n1", config, env={"TSCHED_FAILPOINTS": "nonsense"})
    assert refused.wait(timeout=30) != 0
    assert "unknown failpoints ['nonsense']" in nodes.log_path("n1").read_text()
    running = nodes.start("n1", config)
    def up() -> bool:
        try:
            return httpx.get(f"http://{http['n1']}/healthz").status_code == 200
        except httpx.HTTPError:
            return running.poll() is not None
    wait_until(up, 30, "the node up")
    assert running.poll() is None, nodes.log_path("n1").read_text()
    with pytest.raises(subprocess.TimeoutExpired):
        running.wait(timeout=0.01)
    nodes.kill("n1")
    assert running.returncode == -signal.SIGKILL and not nodes.alive("n1")


def test_each_node_id_has_a_zygote_with_a_hash_seed_of_its_own(tmp_path, zygotes) -> None:
    for node_id in ("n1", "n2"):
        done = zygotes.start(node_id, ["tsnode", "--help"], log=tmp_path / f"{node_id}.log",
                             cwd=None, env={})
        assert done.wait(timeout=30) == 0
        assert "--config" in (tmp_path / f"{node_id}.log").read_text()
    assert hash_seed(zygotes.procs["n1"].pid) != hash_seed(zygotes.procs["n2"].pid)


def test_nodes_fork_while_the_zygote_runs_and_start_again_after_it_died(tmp_path,
                                                                        zygotes) -> None:
    log = tmp_path / "h.log"
    first = zygotes.start("n1", ["tsnode", "--help"], log=log, cwd=None, env={})
    assert first.wait(timeout=30) == 0
    zygotes.procs["n1"].kill()
    zygotes.procs["n1"].wait(timeout=30)
    again = zygotes.start("n1", ["tsnode", "--help"], log=log, cwd=None, env={})
    assert again.wait(timeout=30) == 0
    wait_until(lambda: log.read_text().count("--config") == 2, 5, "both helps logged")


def test_a_zygote_that_does_not_answer_is_a_clear_error(tmp_path, monkeypatch) -> None:
    """No pid within PID_WAIT_S (a zygote still importing on a starved machine): the start
    fails saying so, not with a KeyError from deep inside."""
    mute = tmp_path / "mute-zygote"
    mute.write_text("#!/bin/sh\nexec sleep 30\n")
    mute.chmod(0o755)
    monkeypatch.setattr(forked, "PID_WAIT_S", 0.5)
    z = Zygotes(python=str(mute))
    try:
        with pytest.raises(ChildProcessError, match="did not fork .*no answer within"):
            z.start("n1", ["tsnode", "--id", "n1"], log=tmp_path / "n1.log", cwd=tmp_path,
                    env={})
    finally:
        for proc in z.procs.values():
            proc.kill()
        z.close()
