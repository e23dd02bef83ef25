"""Real tsnode clusters on free loopback ports, for benchmarks: the product's launcher
(tsched.client.launcher: ports, cluster.toml, the processes and their stop loop), which the
test harness and `tsctl dev` run too, plus the benchmarks' own waits and measurements.

Each node is its own process (`python -m tsched.node.main`), with its data and log in a
temporary folder that is removed on stop (unless `keep=True`). Durability is the node's
default (fsync group commit); nothing here turns it off.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

# The product's launcher owns ports and config writing for tests and benchmarks alike: one
# port-block rule (below the ephemeral range, every shard's ports checked) for both.
from tsched.client.launcher import Nodes, node_addresses, write_cluster_file


def http_json(method: str, url: str, body: Any = None, timeout_s: float = 5.0) -> tuple[int, Any]:
    """One small blocking JSON call (cluster control, not load)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None


def spread_tenants(shards: int, per_shard: int = 2) -> list[str]:
    """Tenant names, `per_shard` on each shard, in shard order (a sharded run's work is
    spread evenly; one shard only when there is one)."""
    from tsched.node.topology import shard_of_tenant
    out: dict[int, list[str]] = {s: [] for s in range(shards)}
    i = 0
    while any(len(v) < per_shard for v in out.values()):
        name = f"bench-{i}"
        bucket = out[shard_of_tenant(name, shards)]
        if len(bucket) < per_shard:
            bucket.append(name)
        i += 1
    return [t for s in range(shards) for t in out[s]]


class LocalCluster:
    def __init__(self, nodes: int = 3, keep: bool = False, root: str | None = None,
                 shards: int = 1, env: dict[str, str] | None = None) -> None:
        self.ids = [f"n{i + 1}" for i in range(nodes)]
        self.root = root or tempfile.mkdtemp(prefix="tsched-bench-")
        self.keep = keep
        self.shards = shards
        self.env = env     # e.g. PYTHONPATH of another checkout, for an A/B in one run
        self.raft, self.http = node_addresses(self.ids, shards)
        self.launcher = Nodes(self.root)
        self.procs = self.launcher.procs
        self.config_path = os.path.join(self.root, "cluster.toml")
        write_cluster_file(self.config_path, "bench", self.raft, self.http,
                           f"{self.root}/{{id}}", shards=self.shards)

    def url(self, node_id: str) -> str:
        return f"http://{self.http[node_id]}"

    @property
    def urls(self) -> list[str]:
        return [self.url(i) for i in self.ids]

    def start_node(self, node_id: str) -> None:
        self.launcher.start(node_id, self.config_path, env=self.env)

    def start(self) -> "LocalCluster":
        for i in self.ids:
            self.start_node(i)
        return self

    def alive(self, node_id: str) -> bool:
        return self.launcher.alive(node_id)

    def readiness(self, node_id: str, timeout_s: float = 2.0) -> dict | None:
        """{"ready", "leader", "applied_seq"} from the node's /readyz, or None if it does not
        answer. /readyz is cheap; /v1/cluster hashes every replica's whole state."""
        try:
            code, body = http_json("GET", self.url(node_id) + "/readyz", timeout_s=timeout_s)
        except OSError:
            return None
        if not isinstance(body, dict):
            return None
        details = (body.get("error") or {}).get("details") or {}
        return {"ready": code == 200, "leader": body.get("leader", details.get("leader")),
                "applied_seq": body.get("applied_seq")}

    def leader(self, among: list[str] | None = None) -> str | None:
        """The leader that a majority of the cluster's nodes, asked now, agree on, or None."""
        votes: dict[str, int] = {}
        for i in among or self.ids:
            if self.alive(i):
                st = self.readiness(i)
                if st and st.get("leader") in self.ids:
                    votes[st["leader"]] = votes.get(st["leader"], 0) + 1
        for lead, n in votes.items():
            if n * 2 > len(self.ids) and self.alive(lead):
                return lead
        return None

    def wait_leader(self, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_running()
            lead = self.leader()
            if lead:
                return lead
            time.sleep(0.1)
        raise RuntimeError(f"no leader within {timeout_s} s; logs in {self.root}")

    def wait_applied(self, node_id: str, seq: int, timeout_s: float = 120.0) -> None:
        """Until `node_id` is ready (follows a leader, caught up) and has applied `seq`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_running()
            st = self.readiness(node_id)
            if st and st["ready"] and (st.get("applied_seq") or 0) >= seq:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{node_id} did not apply {seq} within {timeout_s} s; logs in {self.root}")

    def wait_writable(self, timeout_s: float = 60.0) -> None:
        """Until a submit through every node succeeds (leader elected and its barrier applied)."""
        deadline = time.monotonic() + timeout_s
        tenants = spread_tenants(self.shards, 1) if self.shards > 1 else [None]
        for i, tenant in ((i, t) for i in self.ids for t in tenants):
            while True:
                self._check_running()
                body = {"task_type": "bench-warmup", "delay_s": 3600}
                if tenant is not None:
                    body["tenant"] = tenant
                try:
                    code, _ = http_json("POST", self.url(i) + "/v1/tasks", body, timeout_s=5)
                    if code in (200, 201):
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"node {i} not writable within {timeout_s} s; logs in {self.root}")
                time.sleep(0.1)

    def _check_running(self) -> None:
        dead = [i for i, p in self.procs.items() if p.poll() is not None and not getattr(p, "killed", False)]
        if dead:
            raise RuntimeError(f"node(s) {dead} exited; logs in {self.root}")

    def kill(self, node_id: str, sig: int = signal.SIGKILL) -> None:
        p = self.procs[node_id]
        p.killed = True  # type: ignore[attr-defined]
        self.launcher.kill(node_id, sig, timeout_s=30)

    def pid(self, node_id: str) -> int:
        return self.procs[node_id].pid

    def rss_bytes(self, node_id: str) -> int:
        """Resident memory of the node's main process (VmRSS)."""
        with open(f"/proc/{self.pid(node_id)}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        self.launcher.stop_all(15.0)
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None and not self.keep:
            self.keep = True  # a failed run keeps its logs for diagnosis
            print(f"cluster data and logs kept in {self.root}", file=sys.stderr)
        self.stop()
