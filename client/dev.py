"""`tsctl dev`: run every node of a cluster file on this machine, in the foreground.

Nodes run as `tsnode` subprocesses in their own sessions, so a Ctrl-C in the terminal
reaches only this process, which then stops every node in order and waits for them.
Each node's output goes to `.tsched/logs/<id>.log` next to the config file.
"""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import httpx

LEADER_WAIT_S = 60.0   # every shard elects; a loaded laptop may take a while: wait, then give up
STOP_WAIT_S = 10.0          # per node, after SIGTERM, before SIGKILL
POLL_S = 0.2                # how often the leader wait asks the nodes


class DevError(Exception):
    """The cluster file is unusable or the cluster did not come up."""


@dataclass(frozen=True)
class DevNode:
    id: str
    http: str      # host:port

    @property
    def url(self) -> str:
        return f"http://{self.http}"


def find_config(explicit: str | None) -> Path:
    """The given file, else `cluster.toml` in the current folder or the repository root."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise DevError(f"no such file: {explicit}")
        return path.resolve()
    here = Path.cwd()
    for folder in (here, *here.parents):
        candidate = folder / "cluster.toml"
        if candidate.is_file():
            return candidate.resolve()
        if (folder / ".git").exists():
            break
    raise DevError("no cluster.toml here or at the repository root; pass --config")


def load_nodes(path: Path) -> list[DevNode]:
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise DevError(f"{path}: {exc}") from exc
    nodes = doc.get("node")
    if not isinstance(nodes, list) or not nodes:
        raise DevError(f"{path}: no [[node]] entries")
    out = []
    for entry in nodes:
        if not isinstance(entry, dict) or not entry.get("id") or not entry.get("http"):
            raise DevError(f"{path}: every [[node]] needs id and http")
        out.append(DevNode(str(entry["id"]), str(entry["http"])))
    return out


def with_shards(path: Path, shards: int) -> Path:
    """A copy of the cluster file with `[cluster] shards = N`, written under `.tsched/`
    next to it, whose nodes keep their data in folders of their own (a data dir is made
    for one shard count for good: the file's usual folders are left as they are)."""
    if not 1 <= shards <= 64:
        raise DevError(f"--shards must be in 1..64, got {shards}")
    text = path.read_text()
    text = re.sub(r"(?m)^\s*shards\s*=.*$\n?", "", text)
    text, found = re.subn(r"(?m)^\[cluster\]\s*$", f"[cluster]\nshards = {shards}", text,
                          count=1)
    if not found:
        raise DevError(f"{path}: no [cluster] table")

    def data_dir(m: re.Match) -> str:
        where = (path.parent / m.group(2)).resolve()
        moved = where.parent / f"{where.name}-shards{shards}"
        return f'{m.group(1)}"{moved}"'
    text = re.sub(r'(?m)^(\s*data_dir\s*=\s*)"([^"]*)"', data_dir, text)
    out = path.parent / ".tsched" / f"cluster-shards{shards}.toml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out


class DevCluster:
    def __init__(self, config: Path, nodes: list[DevNode]) -> None:
        self.config, self.nodes = config, nodes
        self.procs: dict[str, subprocess.Popen] = {}
        # A derived file (--shards) lives in .tsched/ itself: its logs go in the same place.
        home = config.parent.parent if config.parent.name == ".tsched" else config.parent
        self.log_dir = home / ".tsched" / "logs"

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for node in self.nodes:
            log = open(self.log_dir / f"{node.id}.log", "ab")
            cmd = [sys.executable, "-m", "tsched.node.main", "--config", str(self.config),
                   "--id", node.id]
            self.procs[node.id] = subprocess.Popen(
                cmd, cwd=self.config.parent, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
            log.close()   # the child holds its own descriptor

    def wait_leader(self, stop: threading.Event, timeout_s: float = LEADER_WAIT_S) -> str | None:
        """The leader's id; None when asked to stop while waiting."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=1.0) as http:
            while time.monotonic() < deadline and not stop.is_set():
                for node in self.nodes:
                    leader = self._ask_leader(http, node)
                    if leader:
                        return leader
                dead = [i for i, p in self.procs.items() if p.poll() is not None]
                if len(dead) == len(self.procs):
                    raise DevError(f"every node exited; see {self.log_dir}")
                stop.wait(POLL_S)
        if stop.is_set():
            return None
        raise DevError(f"no leader within {timeout_s:.0f} s; see {self.log_dir}")

    @staticmethod
    def _ask_leader(http: httpx.Client, node: DevNode) -> str | None:
        """Shard 0's leader once every shard has one (a single group: its leader)."""
        try:
            resp = http.get(node.url + "/v1/cluster")
            body = resp.json() if resp.status_code == 200 else {}
            if any(s.get("leader") is None for s in body.get("shards") or ()):
                return None
            return body.get("leader")
        except (httpx.HTTPError, ValueError, AttributeError):
            return None

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def exited(self) -> list[str]:
        return [i for i, p in self.procs.items() if p.poll() is not None]


def run_dev(config: str | None, echo, shards: int | None = None) -> int:
    """Start, wait for a leader, print addresses, block until SIGINT/SIGTERM, stop. Exit code."""
    path = find_config(config)
    if shards is not None:
        path = with_shards(path, shards)
    nodes = load_nodes(path)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    cluster = DevCluster(path, nodes)
    try:
        cluster.start()
        leader = cluster.wait_leader(stop)
        if leader is None:
            return 0
        echo(f"tsched dev cluster from {path}: leader {leader}"
             + (f", {shards} shards (tsctl cluster status shows each)" if shards else ""))
        for node in nodes:
            echo(f"  {node.id}: API {node.url}/v1   dashboard {node.url}/")
        echo(f"  logs: {cluster.log_dir}")
        echo(f"  export TSCTL_URL={','.join(n.url for n in nodes)}")
        echo("Ctrl-C stops the cluster.")
        _watch(cluster, stop, echo)
        return 0
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        echo("stopped every node.")


def _watch(cluster: DevCluster, stop: threading.Event, echo) -> None:
    """Block until asked to stop, saying once when a node exits on its own."""
    reported: set[str] = set()
    while not stop.wait(0.5):
        for node_id in cluster.exited():
            if node_id not in reported:
                reported.add(node_id)
                echo(f"node {node_id} exited (code {cluster.procs[node_id].returncode}); "
                     f"see {cluster.log_dir / (node_id + '.log')}", err=True)
