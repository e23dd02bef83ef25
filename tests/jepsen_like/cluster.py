"""Real tsnode processes on loopback, every link through a fault proxy.

Raft: pysyncobj opens one TCP connection per node pair, dialled by the node whose address
string is greater. That node gets `TSCHED_RAFT_DIAL` mapping the peer's Raft address to a
proxy in front of the peer, so each pair's traffic, both ways, crosses exactly one proxy
(`raft_link(a, b)`). Clients reach each node through its own proxy (`http_link(n)`).

Each node also gets a clock offset file (`TSCHED_CLOCK_OFFSET_FILE`) so the nemesis can
jump its wall clock at run time, and the run's failpoints (`TSCHED_FAILPOINTS`).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from .disks import SmallDisks
from .proxy import ProxyHub

STOP_WAIT_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("statemachine", "node", "client")


def snapshot_code(out_dir: str) -> str:
    """Copy the node's source into DIR/code/tsched and return the folder for PYTHONPATH.

    Nodes restarted mid-run must run the code the run started with: a source edit landing
    between a node's first start and its restart would otherwise replay the same log
    through other rules and look like lost or rewritten history."""
    root = os.path.join(out_dir, "code")
    pkg = os.path.join(root, "tsched")
    os.makedirs(pkg, exist_ok=True)
    with open(os.path.join(pkg, "__init__.py"), "w", encoding="utf-8") as f:
        f.write('"""A frozen copy of tsched for one harness run."""\n')
    for name in PACKAGES:
        shutil.copytree(os.path.join(REPO_ROOT, name), os.path.join(pkg, name),
                        ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    return root


def tsnode_command() -> list[str]:
    return [sys.executable, "-m", "tsched.node.main"]


@dataclass
class NodeProc:
    id: str
    raft: str
    http: str
    data_dir: str
    log_path: str
    clock_file: str
    env: dict
    proc: subprocess.Popen | None = None
    paused: bool = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Cluster:
    def __init__(self, out_dir: str, n_nodes: int = 3, failpoints: tuple[str, ...] = (),
                 hub: ProxyHub | None = None, disks: SmallDisks | None = None) -> None:
        self.out_dir = os.path.abspath(out_dir)
        self.hub = hub or ProxyHub()
        self.ids = [f"n{i}" for i in range(1, n_nodes + 1)]
        self.nodes: dict[str, NodeProc] = {}
        self.client_urls: dict[str, str] = {}     # node id -> proxied http://host:port
        self.direct_urls: dict[str, str] = {}     # node id -> http://host:port (checker)
        self.failpoints = tuple(failpoints)
        self.disks = disks          # small tmpfs data dirs for the disk_full fault
        self.config_path = os.path.join(self.out_dir, "cluster.toml")
        self.code_path = snapshot_code(self.out_dir)
        self._layout()

    # --- layout -------------------------------------------------------------------------

    def _layout(self) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        for nid in self.ids:
            self.nodes[nid] = NodeProc(
                nid, f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}",
                os.path.join(self.out_dir, "data", nid), os.path.join(self.out_dir, f"{nid}.log"),
                os.path.join(self.out_dir, f"clock-{nid}"), {})
        dial: dict[str, list[str]] = {nid: [] for nid in self.ids}
        for a in self.ids:
            for b in self.ids:
                na, nb = self.nodes[a], self.nodes[b]
                if na.raft > nb.raft:       # a dials b: put the proxy there
                    listen = self.hub.add(self.raft_link(a, b), nb.raft)
                    dial[a].append(f"{nb.raft}={listen}")
        for nid, node in self.nodes.items():
            listen = self.hub.add(self.http_link(nid), node.http)
            self.client_urls[nid] = f"http://{listen}"
            self.direct_urls[nid] = f"http://{node.http}"
            self.set_clock_offset(nid, 0)
            node.env = {"PYTHONPATH": os.pathsep.join(
                            filter(None, [self.code_path, os.environ.get("PYTHONPATH")])),
                        "TSCHED_RAFT_DIAL": ",".join(dial[nid]),
                        "TSCHED_CLOCK_OFFSET_FILE": node.clock_file,
                        "TSCHED_FAILPOINTS": ",".join(self.failpoints)}
        self._write_config()
        if self.disks is not None:
            for nid, node in self.nodes.items():
                if not self.disks.mount(nid, node.data_dir):
                    break

    def _write_config(self) -> None:
        lines = ["[cluster]", 'name = "jepsen"']
        for node in self.nodes.values():
            lines += ["", "[[node]]", f'id = "{node.id}"', f'raft = "{node.raft}"',
                      f'http = "{node.http}"', f'data_dir = "{node.data_dir}"']
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")

    def raft_link(self, a: str, b: str) -> str:
        """The proxy carrying the pair's one connection (named by dialler -> listener)."""
        na, nb = self.nodes[a], self.nodes[b]
        return f"raft:{a}->{b}" if na.raft > nb.raft else f"raft:{b}->{a}"

    def dialer(self, a: str, b: str) -> str:
        return a if self.nodes[a].raft > self.nodes[b].raft else b

    @staticmethod
    def http_link(nid: str) -> str:
        return f"http:{nid}"

    def links_between(self, group_a, group_b) -> list[str]:
        return sorted({self.raft_link(a, b) for a in group_a for b in group_b if a != b})

    # --- processes ----------------------------------------------------------------------

    def start(self, nid: str, *args: str) -> None:
        """Start a node; `args` are extra tsnode options ("--rejoin-empty")."""
        node = self.nodes[nid]
        env = {**os.environ, **node.env}
        log = open(node.log_path, "ab")
        node.proc = subprocess.Popen(
            [*tsnode_command(), "--config", self.config_path, "--id", nid, *args],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        node.paused = False

    def start_all(self) -> None:
        for nid in self.ids:
            self.start(nid)

    def signal(self, nid: str, sig: int) -> None:
        node = self.nodes[nid]
        if node.alive:
            try:
                os.killpg(node.proc.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self, nid: str) -> None:
        self.signal(nid, signal.SIGKILL)
        node = self.nodes[nid]
        if node.proc is not None:
            node.proc.wait(timeout=STOP_WAIT_S)
        node.paused = False

    def pause(self, nid: str) -> None:
        self.signal(nid, signal.SIGSTOP)
        self.nodes[nid].paused = True

    def resume(self, nid: str) -> None:
        self.signal(nid, signal.SIGCONT)
        self.nodes[nid].paused = False

    def set_clock_offset(self, nid: str, offset_ms: int) -> None:
        """Atomic replace, so the node never reads a half-written number."""
        path = self.nodes[nid].clock_file
        with open(path + ".tmp", "w", encoding="ascii") as f:
            f.write(str(int(offset_ms)))
        os.replace(path + ".tmp", path)

    def exited_unexpectedly(self) -> dict[str, int]:
        return {nid: n.proc.returncode for nid, n in self.nodes.items()
                if n.proc is not None and n.proc.poll() not in (None, 0, -signal.SIGKILL)}

    def stop_all(self) -> None:
        for nid in self.ids:
            self.resume(nid)
            self.signal(nid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for node in self.nodes.values():
            if node.proc is None:
                continue
            try:
                node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.signal(node.id, signal.SIGKILL)
                node.proc.wait(timeout=STOP_WAIT_S)

    def close(self) -> None:
        try:
            self.stop_all()
        finally:
            self.hub.stop()
            if self.disks is not None:
                self.disks.unmount_all()
