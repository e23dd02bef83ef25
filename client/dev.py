"""`tsctl dev`: run every node of a cluster file on this machine, in the foreground.

Nodes run as `tsnode` subprocesses in their own sessions, so a Ctrl-C in the terminal
reaches only this process, which then stops every node in order and waits for them.
Each node's output goes to `.tsched/logs/<id>.log` next to the config file. The processes
and the leader wait are the product's launcher's (launcher.py), which the test harness and
the benchmarks run too; this module reads the cluster file and talks to the terminal.
"""
from __future__ import annotations

import re
import signal
import threading
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .launcher import LaunchError, Nodes, wait_leader

LEADER_WAIT_S = 60.0   # every shard elects; a loaded laptop may take a while: wait, then give up
STOP_WAIT_S = 10.0          # per node, after SIGTERM, before SIGKILL
POLL_S = 0.2                # how often the leader wait asks the nodes


# The cluster file is unusable or the cluster did not come up (the launcher's error).
DevError = LaunchError


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
        # A derived file (--shards) lives in .tsched/ itself: its logs go in the same place.
        home = config.parent.parent if config.parent.name == ".tsched" else config.parent
        self.log_dir = home / ".tsched" / "logs"
        self.launcher = Nodes(self.log_dir, cwd=config.parent)
        self.procs = self.launcher.procs

    def start(self) -> None:
        for node in self.nodes:
            self.launcher.start(node.id, self.config)

    def wait_leader(self, stop: threading.Event, timeout_s: float = LEADER_WAIT_S) -> str | None:
        """The leader's id; None when asked to stop while waiting."""
        return wait_leader(self.launcher, [n.url for n in self.nodes], timeout_s, stop, POLL_S)

    def stop(self) -> None:
        """SIGTERM to each node's main process (a sharded node stops its shards in order),
        SIGKILL to those still up after STOP_WAIT_S."""
        self.launcher.stop_all(STOP_WAIT_S, group=False)

    def exited(self) -> list[str]:
        return self.launcher.exited()


def run_dev(config: str | None, echo: Callable[..., object],
            shards: int | None = None) -> int:
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
        for line in banner(path, leader, shards, nodes, cluster.log_dir):
            echo(line)
        _watch(cluster, stop, echo)
        return 0
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        echo("stopped every node.")


def banner(path: Path, leader: str, shards: int | None, nodes: list[DevNode],
           log_dir: Path) -> list[str]:
    """What `tsctl dev` says once the cluster serves. Each node is named by its base URL,
    the one TSCTL_URL and --url take (the client adds /v1/... itself)."""
    lines = [f"tsched dev cluster from {path}: leader {leader}"
             + (f", {shards} shards (tsctl cluster status shows each)" if shards else "")]
    lines += [f"  {node.id}: {node.url}   dashboard {node.url}/"
              for node in nodes]
    lines.append(f"  logs: {log_dir}")
    lines.append(f"  export TSCTL_URL={','.join(n.url for n in nodes)}")
    lines.append("Ctrl-C stops the cluster.")
    return lines


def _watch(cluster: DevCluster, stop: threading.Event, echo: Callable[..., object]) -> None:
    """Block until asked to stop, saying once when a node exits on its own."""
    reported: set[str] = set()
    while not stop.wait(0.5):
        for node_id in cluster.exited():
            if node_id not in reported:
                reported.add(node_id)
                echo(f"node {node_id} exited (code {cluster.procs[node_id].returncode}); "
                     f"see {cluster.log_dir / (node_id + '.log')}", err=True)
