"""`tsctl dev`: a leader within 15 s, every node stopped on SIGINT, exit 0, and nothing
left for git to see (data, archive and logs go under the ignored .tsched/)."""
from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.harness.ports import node_addresses
from tests.harness.waits import wait_until

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
TSCTL = shutil.which("tsctl") or str(Path(sys.executable).with_name("tsctl"))
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]


def write_repo(root: Path) -> list[str]:
    """A git repository holding a 3-node cluster.toml on free ports and the project's
    .gitignore; returns the nodes' HTTP addresses."""
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    rafts, https = node_addresses([f"n{i}" for i in (1, 2, 3)], 1)
    lines = ["[cluster]", 'name = "devtest"']
    for i, (raft, http) in enumerate(zip(rafts.values(), https.values()), 1):
        lines += ["", "[[node]]", f'id = "n{i}"', f'raft = "{raft}"',
                  f'http = "{http}"', f'data_dir = ".tsched/data/n{i}"']
    (root / "cluster.toml").write_text("\n".join(lines) + "\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(GIT + ["add", "."], cwd=root, check=True)
    subprocess.run(GIT + ["commit", "-q", "-m", "cluster"], cwd=root, check=True)
    return list(https.values())


def lines_of(proc: subprocess.Popen) -> "queue.Queue[str]":
    q: "queue.Queue[str]" = queue.Queue()

    def pump():
        for line in proc.stdout:
            q.put(line)
        q.put("")   # EOF
    threading.Thread(target=pump, daemon=True).start()
    return q


def wait_line(q: "queue.Queue[str]", needle: str, timeout_s: float) -> list[str]:
    seen, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = q.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        seen.append(line)
        if needle in line or line == "":
            return seen
    raise AssertionError(f"no {needle!r} line: {seen}")


def answers(http: str) -> bool:
    try:
        httpx.get(f"http://{http}/healthz", timeout=1.0)
        return True
    except httpx.HTTPError:
        return False


def processes_using(path: Path) -> list[int]:
    """Pids whose command line names `path` (the nodes started by dev)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(path).encode() in (entry / "cmdline").read_bytes():
                    out.append(int(entry.name))
            except OSError:
                pass
    return out


def kill_left(proc: subprocess.Popen, config: Path) -> None:
    """After a failed step: the dev process and every node it started (each node has a
    session of its own, so killing dev's process group is not enough)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    for pid in processes_using(config):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_dev_runs_the_cluster_until_sigint(tmp_path):
    https = write_repo(tmp_path)
    proc = subprocess.Popen([TSCTL, "dev"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out = lines_of(proc)
        seen = wait_line(out, "leader", timeout_s=90)   # dev itself gives up after 60 s
        assert "leader n" in seen[-1], seen
        banner = wait_line(out, "Ctrl-C", timeout_s=5)
        assert any(https[0] in line for line in banner)
        leaders = {httpx.get(f"http://{h}/v1/cluster", timeout=5).json()["leader"]
                   for h in https}
        assert len(leaders) == 1 and leaders != {None}
        assert len(processes_using(tmp_path / "cluster.toml")) == 3
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        rest = wait_line(out, "stopped every node", timeout_s=5)
        assert rest
    except BaseException:
        kill_left(proc, tmp_path / "cluster.toml")
        raise
    left = processes_using(tmp_path / "cluster.toml")
    kill_left(proc, tmp_path / "cluster.toml")       # so that a failed check leaves no node running
    assert left == []
    assert not any(answers(h) for h in https)
    assert (tmp_path / ".tsched" / "data" / "n1").is_dir()   # data went where the file says
    # no [archive] in the file: each node archives under its data dir all the same
    assert (tmp_path / ".tsched" / "data" / "n1" / "archive").is_dir()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, check=True,
                            capture_output=True, text=True).stdout
    assert status == ""


def test_dev_with_shards_runs_every_shard_and_leaves_the_file_s_data_alone(tmp_path):
    from tests.harness.ports import free_shard_ports
    rafts, https = free_shard_ports(3, 2)
    write_repo(tmp_path)
    lines = ["[cluster]", 'name = "devtest"']
    for i, (raft, http) in enumerate(zip(rafts, https), 1):
        lines += ["", "[[node]]", f'id = "n{i}"', f'raft = "127.0.0.1:{raft}"',
                  f'http = "127.0.0.1:{http}"', f'data_dir = ".tsched/data/n{i}"']
    (tmp_path / "cluster.toml").write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen([TSCTL, "dev", "--shards", "2"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    derived = tmp_path / ".tsched" / "cluster-shards2.toml"
    try:
        out = lines_of(proc)
        seen = wait_line(out, "leader", timeout_s=90)
        assert "2 shards" in seen[-1], seen
        wait_line(out, "Ctrl-C", timeout_s=5)
        shards = httpx.get(f"http://127.0.0.1:{https[0]}/v1/cluster", timeout=10).json()["shards"]
        assert [s["shard"] for s in shards] == [0, 1]

        def every_shard_led():
            # Leadership may move once after start on a loaded machine (a follower that
            # missed heartbeats while nine processes started); every shard leads again.
            doc = httpx.get(f"http://127.0.0.1:{https[0]}/v1/cluster", timeout=10).json()
            return all(s["leader"] for s in doc["shards"])
        wait_until(every_shard_led, timeout_s=30, what="a leader in every shard")
        # supervisors, their zygotes and shard processes (forked: the zygote's command line,
        # which names the node's file)
        assert len(processes_using(derived)) == 3 + 3 + 3 * 2
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    except BaseException:
        kill_left(proc, derived)
        raise
    left = processes_using(derived)
    kill_left(proc, derived)       # so that a failed check leaves no node running
    assert left == []
    assert (tmp_path / ".tsched" / "data" / "n1-shards2" / "shard-1").is_dir()
    assert not (tmp_path / ".tsched" / "data" / "n1").exists()   # the file's own data dir
    assert (tmp_path / ".tsched" / "logs" / "n1.log").is_file()
