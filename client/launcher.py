"""Local clusters on this machine: loopback ports, the cluster file, `tsnode` processes.

The one launcher of the project: `tsctl dev` (dev.py) runs it, and so do the test
harness (tests/harness/cluster.py) and the benchmarks (bench/lib/cluster.py).

- ports: `free_port`, `free_ports`, and checked port blocks of whole clusters
  (`free_shard_ports`, `node_addresses`), below the ephemeral range;
- the file: `cluster_toml`, the text of a local cluster's cluster.toml, and
  `write_cluster_file`, which writes it for some or all of the nodes;
- the processes: `Nodes`, one `tsnode` process per node, each in a session of its own
  with its output in `<log_dir>/<id>.log` (start, signal, kill, stop one, stop all with
  SIGTERM then SIGKILL, close), and `wait_leader`, until every shard has a leader.

Nodes are started as subprocesses (`tsnode`): the client never imports the node.
"""
from __future__ import annotations

import contextlib
import os
import random
from signal import SIGCONT, SIGKILL, SIGTERM
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from tsched.client.forked import ForkedProcess, Zygotes

PORTS_FLOOR = 10_000
# How a node starts: `tsnode` as this interpreter runs it (its own environment's package).
NODE_COMMAND = (sys.executable, "-m", "tsched.node.main")
KILL_WAIT_S = 10.0      # after SIGKILL, for the process to be reaped


class LaunchError(Exception):
    """A local cluster did not come up (or a node did not stop)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1, free a moment ago: every socket is held
    until all are bound, as ports drawn one at a time can repeat (seen in a test run)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def ephemeral_low() -> int:
    """The first port of the OS's ephemeral range (outgoing connections take those)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def shard_ports_span(nodes: int, shards: int) -> int:
    """How many ports above its base a cluster's block reaches."""
    return 100 * shards + nodes


def free_shard_ports(nodes: int, shards: int, bases: tuple[int, int] | None = None
                     ) -> tuple[list[int], list[int]]:
    """(base Raft ports, HTTP ports) of a sharded cluster's nodes, every shard's Raft and
    internal HTTP port (base + k + 100 s, and 50 above) free, HTTP ports just past the
    last shard. All below the ephemeral range: a sharded node makes many outgoing
    connections, and one of them must not take a killed node's port before it restarts.
    `bases`: the lowest and highest base to pick from (default: all below that range)."""
    low, high = bases or (PORTS_FLOOR, ephemeral_low() - 1 - shard_ports_span(nodes, shards))
    for _ in range(500):
        base = random.randint(low, high)
        rafts = [base + k for k in range(nodes)]
        https = [base + 100 * shards + k for k in range(nodes)]
        ports = [p + 100 * s + off for p in rafts for s in range(shards) for off in (0, 50)]
        if all(is_free(p) for p in ports + https):
            return rafts, https
    raise RuntimeError("no free block of shard ports on loopback")


def node_addresses(ids: list[str], shards: int, bases: tuple[int, int] | None = None
                   ) -> tuple[dict[str, str], dict[str, str]]:
    """({id: raft host:port}, {id: http host:port}) for a cluster of `shards` shards.

    One checked block below the ephemeral range for every shard count: ports drawn one at
    a time from the OS can repeat within a cluster, and an ephemeral one can be taken by an
    outgoing connection before its node binds it (both were seen in test runs)."""
    rafts, https = free_shard_ports(len(ids), shards, bases)
    return ({i: f"127.0.0.1:{p}" for i, p in zip(ids, rafts)},
            {i: f"127.0.0.1:{p}" for i, p in zip(ids, https)})


def cluster_toml(name: str, raft: dict[str, str], http: dict[str, str],
                 data_dirs: dict[str, str], *, shards: int = 1, secret: str | None = None,
                 extra_toml: str = "") -> str:
    """The file's text: [cluster] (`shards` only when not 1, `secret` when given), one
    [[node]] per id of `raft` in its order, then `extra_toml` as it is."""
    lines = ["[cluster]", f'name = "{name}"']
    if shards != 1:
        lines.append(f"shards = {shards}")
    if secret:
        lines.append(f'secret = "{secret}"')
    for i in raft:
        lines += ["", "[[node]]", f'id = "{i}"', f'raft = "{raft[i]}"',
                  f'http = "{http[i]}"', f'data_dir = "{data_dirs[i]}"']
    return "\n".join(lines) + "\n" + extra_toml


def write_cluster_file(path: Path | str, name: str, raft: Mapping[str, str],
                       http: Mapping[str, str], data_dir: str = "data/{id}", *,
                       ids: Sequence[str] | None = None, shards: int = 1,
                       secret: str | None = None, extra_toml: str = "") -> Path:
    """Write the cluster file of `ids` (default: every node of `raft`, in its order) to
    `path`; each node's data dir is `data_dir` with `{id}` replaced by its id (a relative
    one is read from the file's folder). Returns the path."""
    ids = list(raft) if ids is None else list(ids)
    out = Path(path)
    out.write_text(cluster_toml(
        name, {i: raft[i] for i in ids}, {i: http[i] for i in ids},
        {i: data_dir.replace("{id}", i) for i in ids}, shards=shards, secret=secret,
        extra_toml=extra_toml))
    return out


class Nodes:
    """The `tsnode` processes of one local cluster, by node id.

    Every node runs in a session of its own (a Ctrl-C in a terminal reaches only the
    launching process; a signal to a node reaches its whole process group, shard
    processes included) with stdout and stderr appended to `log_path(id)`. `command`
    (default NODE_COMMAND) starts a node (`--config FILE --id ID` and any extra options follow it); `cwd` is the
    nodes' working folder (relative data dirs of the file are read from there)."""

    def __init__(self, log_dir: Path | str, command: Sequence[str] | None = None, *,
                 cwd: Path | None = None, zygotes: Zygotes | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.command = list(NODE_COMMAND if command is None else command)
        self.default_command = list(self.command)
        self.cwd = cwd
        self.zygotes = zygotes      # fork nodes of the default command from these
        self.procs: dict[str, subprocess.Popen[bytes] | ForkedProcess] = {}
        # Every node process ever started, with its start time (`_started_at`), for close.
        self.started: list[tuple[int, int | None]] = []

    def log_path(self, node_id: str) -> Path:
        return self.log_dir / f"{node_id}.log"

    def start(self, node_id: str, config: Path | str, *args: str,
              env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes] | ForkedProcess:
        """Start one node of `config`; `args` are extra tsnode options, `env` variables
        added to this process's environment."""
        if self.alive(node_id):
            raise LaunchError(f"{node_id} is running already")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        argv = [*self.command, "--config", str(config), "--id", node_id, *args]
        proc: subprocess.Popen[bytes] | ForkedProcess
        if self.zygotes is not None and self.command == self.default_command:
            proc = self.zygotes.start(node_id, ["tsnode", *argv[len(self.command):]],
                                      log=self.log_path(node_id), cwd=self.cwd,
                                      env={**os.environ, **(env or {})})
        else:
            with open(self.log_path(node_id), "ab") as out:    # the child holds its own
                proc = subprocess.Popen(
                    argv, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                    env={**os.environ, **env} if env else None)
        self.procs[node_id] = proc
        self.started.append((proc.pid, _started_at(proc.pid)))
        return proc

    def alive(self, node_id: str) -> bool:
        p = self.procs.get(node_id)
        return p is not None and p.poll() is None

    def exited(self) -> list[str]:
        """Nodes whose last process has exited (for any reason)."""
        return [i for i, p in self.procs.items() if p.poll() is not None]

    def signal(self, node_id: str, sig: int, *, group: bool = True) -> None:
        """`sig` to the node's process group (or its main process alone), if it runs: a
        race with its exit is fine."""
        if self.alive(node_id):
            pid = self.procs[node_id].pid
            try:
                os.killpg(pid, sig) if group else os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def kill(self, node_id: str, sig: int = SIGKILL, timeout_s: float = KILL_WAIT_S
             ) -> None:
        """`sig` (default SIGKILL: no cleanup, a crash) to the node's group, and wait."""
        self.signal(node_id, sig)
        if node_id in self.procs:
            self.procs[node_id].wait(timeout=timeout_s)

    def stop(self, node_id: str, timeout_s: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit status. LaunchError (after SIGKILL) if the
        node is still up after `timeout_s`."""
        p = self.procs[node_id]
        self.signal(node_id, SIGTERM)
        try:
            return p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(node_id)
            raise LaunchError(f"{node_id} did not stop within {timeout_s}s") from None

    def stop_all(self, timeout_s: float = 10.0, *, group: bool = True) -> None:
        """SIGTERM to every node at once (resumed first, if stopped), SIGKILL to the groups
        still up after `timeout_s`. `group=False`: SIGTERM to each main process alone (a
        sharded node then stops its shard processes itself, in order)."""
        for i in self.procs:
            self.signal(i, SIGCONT)
            self.signal(i, SIGTERM, group=group)
        deadline = time.monotonic() + timeout_s
        for i, p in self.procs.items():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(i)

    def close(self) -> None:
        """SIGKILL to the process group of every node ever started that still has a
        process, then reap the nodes. A group outlives its first process (a sharded node
        whose main process crashed leaves its shard processes running), and a node started
        again under the same id replaced the old one in `procs`: neither may outlive the
        cluster, whatever `poll` said of them."""
        groups = _live_groups()
        for pid, started_at in self.started:
            if _ours_and_running(pid, started_at, groups):
                try:
                    os.killpg(pid, SIGKILL)
                except ProcessLookupError:
                    # A node forked a moment ago has no group of its own yet (its setsid
                    # comes first thing in the child): the process alone, known to be ours.
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, SIGKILL)
        for p in self.procs.values():
            try:
                p.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (state first); None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _started_at(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot): tells it from a later process that
    was given the same number."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def _live_groups() -> set[int]:
    """The process groups that have a process (a zombie counts: it is not reaped yet)."""
    groups: set[int] = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None:
                groups.add(int(fields[2]))
    return groups


def _ours_and_running(pid: int, started_at: int | None, live_groups: set[int]) -> bool:
    """Whether the process group of node process `pid` (started at `started_at`) still
    has a process of ours. While `pid` itself exists, it is ours only if it started then
    (else the number was given to another process since). Once it has gone, a group of
    that number is still the node's: the number is not given out while a group has it.
    `live_groups`: `_live_groups()`, read once for all the pids of a close."""
    now = _started_at(pid)
    if now is not None:
        return now == started_at
    return pid in live_groups


def leader_of(http: httpx.Client, url: str) -> str | None:
    """Shard 0's leader as the node at `url` sees it, once every shard has one (a single
    group: its leader); None while not, or if the node does not answer."""
    try:
        resp = http.get(url + "/v1/cluster")
        body = resp.json() if resp.status_code == 200 else {}
        if any(s.get("leader") is None for s in body.get("shards") or ()):
            return None
        leader = body.get("leader")
        return str(leader) if leader else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def wait_leader(nodes: Nodes, urls: Sequence[str], timeout_s: float,
                stop: threading.Event | None = None, poll_s: float = 0.2) -> str | None:
    """The leader's id once a node names one for every shard (asked in `urls`' order);
    None when `stop` is set meanwhile. LaunchError if every node exits first, or none
    names a leader within `timeout_s`."""
    stop = stop or threading.Event()
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=1.0) as http:
        while time.monotonic() < deadline and not stop.is_set():
            for url in urls:
                leader = leader_of(http, url)
                if leader:
                    return leader
            if nodes.procs and len(nodes.exited()) == len(nodes.procs):
                raise LaunchError(f"every node exited; see {nodes.log_dir}")
            stop.wait(poll_s)
    if stop.is_set():
        return None
    raise LaunchError(f"no leader within {timeout_s:.0f} s; see {nodes.log_dir}")
