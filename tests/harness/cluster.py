"""Real `tsnode` clusters for tests: start, kill, stop, restart, always clean up.

    from tests.harness.cluster import Cluster

    with Cluster(tmp_path, size=3) as c:        # writes cluster.toml on free loopback ports
        c.start()                               # starts every node (background processes)
        leader = c.wait_leader()                # id of a ready leader all live nodes agree on
        status, body = c.call("n2", "POST", "/v1/tasks", {"task_type": "t"})
        c.kill(leader)                          # SIGKILL (no cleanup: a crash)
        c.wait_leader(exclude=[leader])
        c.restart(leader)                       # same data_dir, same ports
        c.stop("n3")                            # SIGTERM, waits for exit 0
        print(c.log("n1"))                      # the node's log, for failure messages

Elections use the harness's fast timeouts (raft_options.FAST, under [cluster.timeouts]) unless
`fast_raft=False` or `extra_toml` has its own [cluster.timeouts]: tests about election
timing run with the node's defaults.
`env` adds environment variables to every node (e.g. TSCHED_FAILPOINTS);
`node_env={"n1": {...}}` to one node; `command` is what starts a node (default: `tsnode`).
Every process is in its own session and is killed (SIGKILL) on close, whatever happened.
This is the suite's one real-cluster helper: the fault harness (tests/jepsen_like/cluster.py)
builds on it, adding its proxies and clocks. Its processes, ports and cluster file are the
product's launcher's (tsched.client.launcher: `Nodes`, `node_addresses`, `write_cluster_file`),
which `tsctl dev` and the benchmarks' LocalCluster (bench/lib/cluster.py) run too; the
harness adds its waits, its HTTP helpers, pausing and its per-xdist-worker port slices.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tsched.client.forked import Zygotes
from tsched.client.launcher import LaunchError, Nodes, write_cluster_file

from .ports import node_addresses
from .raft_options import timeouts_toml

TSNODE = shutil.which("tsnode") or str(Path(sys.executable).with_name("tsnode"))
# Set for a pytest run (tests/conftest.py): clusters fork their nodes from these zygotes
# (tsched.client.forked) rather than paying `tsnode`'s imports at every start. None (the
# fault harness run from the command line, which starts few nodes): plain processes.
ZYGOTES: Zygotes | None = None


def _settled(shard: dict, exclude) -> bool:
    leader = shard.get("leader")
    live = [n for n in shard.get("nodes") or () if n.get("reachable")]
    leaders = [n["id"] for n in live if n.get("role") == "leader"]
    return leader is not None and leader not in exclude and leaders == [leader]


class Cluster:
    def __init__(self, tmp_path: Path, size: int = 3, *, env: dict[str, str] | None = None,
                 node_env: dict[str, dict[str, str]] | None = None, secret: str | None = None,
                 extra_toml: str = "", status_token: str | None = None,
                 name: str = "test", shards: int = 1, fast_raft: bool = True) -> None:
        self.dir = Path(tmp_path)
        self.name = name
        self.launcher = Nodes(self.dir, [TSNODE], zygotes=ZYGOTES)
        self.ids = [f"n{i + 1}" for i in range(size)]
        self.shards = shards
        self.raft, self.http = node_addresses(self.ids, shards)
        self.env = dict(env or {})
        self.node_env = {k: dict(v) for k, v in (node_env or {}).items()}
        self.procs: dict[str, subprocess.Popen] = self.launcher.procs
        self.paused: set[str] = set()   # stopped with SIGSTOP, not yet resumed
        self.config_path = self.dir / "cluster.toml"
        self.config_paths: dict[str, Path] = {}   # nodes that joined: a file of their own
        if fast_raft and "[cluster.timeouts]" not in extra_toml:
            extra_toml = timeouts_toml() + extra_toml
        self._secret, self._extra_toml = secret, extra_toml
        self._write_config(secret, extra_toml)
        self.client = httpx.Client(timeout=30)
        # With [auth] in extra_toml: the token the helper's own status checks use.
        self.status_token = status_token

    @property
    def command(self) -> list[str]:
        """What starts a node (`--config FILE --id ID` follow it)."""
        return self.launcher.command

    @command.setter
    def command(self, value: list[str]) -> None:
        self.launcher.command = list(value)

    # --- setup -----------------------------------------------------------------------------

    def _write_config(self, secret: str | None, extra_toml: str) -> None:
        write_cluster_file(self.config_path, self.name, self.raft, self.http, ids=self.ids,
                           shards=self.shards, secret=secret, extra_toml=extra_toml)

    def add_node(self, node_id: str, join_via: str, *args: str,
                 ports: tuple[str, str] | None = None) -> None:
        """Start a new node with `--join` (the API of `join_via`) on `ports` ((raft, http)
        host:port; default: free ones): its file lists it alone (DESIGN 6.2). It is one of
        `ids` from now on."""
        if ports is None:
            raft, http = node_addresses([node_id], self.shards)
            ports = (raft[node_id], http[node_id])
        self.raft[node_id], self.http[node_id] = ports
        self.config_paths[node_id] = write_cluster_file(
            self.dir / f"{node_id}.toml", self.name, self.raft, self.http, ids=[node_id],
            shards=self.shards, secret=self._secret, extra_toml=self._extra_toml)
        if node_id not in self.ids:
            self.ids.append(node_id)
        self.start_node(node_id, "--join", self.url(join_via), *args)

    def rewrite_config(self) -> None:
        """cluster.toml lists the current `ids` (after membership changes: DESIGN 6.2)."""
        write_cluster_file(self.config_path, self.name, self.raft, self.http, ids=self.ids,
                           shards=self.shards, secret=self._secret, extra_toml=self._extra_toml)

    def forget(self, node_id: str) -> None:
        """`node_id` is no longer a member: no wait looks at it (its process, if any, is
        still closed with the others)."""
        if node_id in self.ids:
            self.ids.remove(node_id)

    def url(self, node_id: str) -> str:
        return f"http://{self.http[node_id]}"

    @property
    def urls(self) -> list[str]:
        return [self.url(i) for i in self.ids]

    def data_dir(self, node_id: str) -> Path:
        return self.dir / "data" / node_id

    def log_path(self, node_id: str) -> Path:
        return self.launcher.log_path(node_id)

    def log(self, node_id: str, tail_chars: int = 4000) -> str:
        p = self.log_path(node_id)
        return p.read_text(errors="replace")[-tail_chars:] if p.exists() else ""

    # --- processes ---------------------------------------------------------------------------

    def start(self, *node_ids: str) -> "Cluster":
        for i in node_ids or self.ids:
            self.start_node(i)
        return self

    def start_node(self, node_id: str, *args: str) -> None:
        """Start one node; `args` are extra tsnode options (e.g. "--rejoin-empty")."""
        assert not self.alive(node_id), node_id
        self.launcher.start(node_id, self.config_paths.get(node_id, self.config_path), *args,
                         env={**self.env, **self.node_env.get(node_id, {})})
        self.paused.discard(node_id)

    def alive(self, node_id: str) -> bool:
        return self.launcher.alive(node_id)

    def signal(self, node_id: str, sig: int) -> None:
        """`sig` to the node's process group, if it runs (a race with its exit is fine)."""
        self.launcher.signal(node_id, sig)

    def kill(self, node_id: str) -> None:
        """SIGKILL: the node dies without any cleanup."""
        self.launcher.kill(node_id)
        self.paused.discard(node_id)

    def stop(self, node_id: str, timeout_s: float = 15) -> int:
        """SIGTERM and wait; returns the exit status."""
        try:
            return self.launcher.stop(node_id, timeout_s)
        except LaunchError as exc:
            raise AssertionError(f"{exc}:\n{self.log(node_id)}") from None

    def pause(self, node_id: str) -> None:
        self.signal(node_id, signal.SIGSTOP)
        self.paused.add(node_id)

    def resume(self, node_id: str) -> None:
        self.signal(node_id, signal.SIGCONT)
        self.paused.discard(node_id)

    def stop_all(self, timeout_s: float = 10) -> None:
        """SIGTERM to every node at once (resumed first), SIGKILL to those still up after
        `timeout_s`."""
        self.paused.clear()      # resumed first, nodes no longer members too
        self.launcher.stop_all(timeout_s)

    def exited_unexpectedly(self) -> dict[str, int]:
        """Nodes that exited by themselves with an error (not 0, not our SIGKILL)."""
        return {i: p.returncode for i, p in self.procs.items()
                if p.poll() not in (None, 0, -signal.SIGKILL)}

    def restart(self, node_id: str) -> None:
        if self.alive(node_id):
            self.stop(node_id)
        self.start_node(node_id)

    def close(self) -> None:
        self.launcher.close()
        self.client.close()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- HTTP --------------------------------------------------------------------------------

    def call(self, node_id: str, method: str, path: str, body: Any = None, *,
             timeout_s: float = 30, headers: dict | None = None) -> tuple[int, Any]:
        r = self.client.request(method, self.url(node_id) + path, json=body,
                                timeout=timeout_s, headers=headers)
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, r.text

    def self_status(self, node_id: str, timeout_s: float = 1.0) -> dict | None:
        try:
            auth = {"Authorization": f"Bearer {self.status_token}"} if self.status_token else None
            s, b = self.call(node_id, "GET", "/v1/cluster/self", timeout_s=timeout_s,
                             headers=auth)
        except httpx.HTTPError:
            return None
        return b if s == 200 else None

    def wait_leader(self, timeout_s: float = 30, exclude: tuple | list = ()) -> str:
        """The id of a ready leader that every live node (not excluded) names."""
        deadline = time.monotonic() + timeout_s
        live = [i for i in self.ids if i not in exclude and self.alive(i)]
        while True:
            seen = {i: self.self_status(i) for i in live}
            leaders = {s.get("leader") for s in seen.values() if s}
            ready = [i for i, s in seen.items() if s and s.get("role") == "leader"
                     and s.get("ready")]
            if len(ready) == 1 and leaders == {ready[0]} and all(seen.values()):
                return ready[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no agreed leader within {timeout_s}s: {seen}\n" +
                                     "\n".join(f"--- {i}\n{self.log(i)}" for i in live))
            time.sleep(0.05)

    def shard_status(self, via: str) -> list[dict] | None:
        try:
            s, b = self.call(via, "GET", "/v1/cluster", timeout_s=5)
        except httpx.HTTPError:
            return None
        return b.get("shards") if s == 200 else None

    def wait_shard_leaders(self, timeout_s: float = 30, exclude: tuple | list = ()
                           ) -> dict[int, str]:
        """{shard: leader} once every shard has one leader, outside `exclude`, that the
        shard's reachable replicas all report, and every live node's router knows (a
        router that has not heard from a new leader yet answers 503 no_leader)."""
        deadline = time.monotonic() + timeout_s
        vias = [i for i in self.ids if i not in exclude and self.alive(i)]
        while True:
            views = [self._leaders(via, exclude) for via in vias]
            if views[0] is not None and all(v == views[0] for v in views):
                return views[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"shards without an agreed leader after {timeout_s}s: "
                                     f"{views}\n--- {vias[0]}\n{self.log(vias[0])}")
            time.sleep(0.1)

    def _leaders(self, via: str, exclude) -> dict[int, str] | None:
        """{shard: leader} as `via` sees it, if every shard there is settled."""
        shards = self.shard_status(via)
        if shards and len(shards) == self.shards and all(_settled(s, exclude) for s in shards):
            return {s["shard"]: s["leader"] for s in shards}
        return None

    def applied_seq(self, node_id: str) -> int:
        """What `node_id` has applied (it must answer)."""
        status = self.self_status(node_id)
        assert status is not None, node_id
        return status["applied_seq"]

    def wait_applied(self, seq: int, node_ids=None, timeout_s: float = 10) -> None:
        """Every given node (default: all live) has applied at least `seq`."""
        deadline = time.monotonic() + timeout_s
        for i in node_ids or [i for i in self.ids if self.alive(i)]:
            while True:
                s = self.self_status(i)
                if s and s["applied_seq"] >= seq:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"{i} did not apply seq {seq} in {timeout_s}s: {s}")
                time.sleep(0.02)

    def followers(self, leader: str) -> list[str]:
        return [i for i in self.ids if i != leader]

    def pages(self, node_id: str, path: str, key: str, query: str = "") -> list[dict]:
        """Every item of a paged listing (`GET path?query&cursor=...` until `next_cursor` is
        null), in the order the pages give them; each page must answer 200."""
        items: list[dict] = []
        cursor = None
        for _ in range(10_000):   # a bound: a cursor that never ends fails the test
            params = "&".join(p for p in (query, f"cursor={cursor}" if cursor else "") if p)
            status, page = self.call(node_id, "GET", f"{path}?{params}" if params else path)
            assert status == 200, page
            items += page[key]
            cursor = page["next_cursor"]
            if cursor is None:
                return items
        raise AssertionError(f"{path}: the cursor never ended")


def running(tmp_path: Path, **kwargs: Any) -> Iterator[Cluster]:
    """For fixtures (`yield from running(...)`): a `Cluster(tmp_path, **kwargs)` with every
    node started and a ready leader (of every shard, with `shards`), closed once the test
    is done."""
    with Cluster(tmp_path, **kwargs) as c:
        c.start()
        if c.shards > 1:
            c.wait_shard_leaders()
        else:
            c.wait_leader()
        yield c
