"""Real tsnode processes on loopback, every link through a fault proxy.

The processes are the suite's real-cluster helper's (tests/harness/cluster.py): this
module adds the harness's parts. Raft: pysyncobj opens one TCP connection per node pair,
dialled by the node whose address string is greater. That node gets `TSCHED_RAFT_DIAL`
mapping the peer's Raft address to a proxy in front of the peer, so each pair's traffic,
both ways, crosses exactly one proxy (`raft_link(a, b)`). Clients reach each node through
its own proxy (`http_link(n)`).

Each node also gets a clock offset file (`TSCHED_CLOCK_OFFSET_FILE`) so the nemesis can
jump its wall clock at run time, and the run's failpoints (`TSCHED_FAILPOINTS`); nodes run
a frozen copy of the code (`snapshot_code`).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.harness.cluster import Cluster as ProcessCluster
from tsched_tree import build_tree
from tsched.node.raft.storage_faults import STORAGE_CORRUPT_EXIT_CODE

from .disks import SmallDisks
from .proxy import ProxyHub



def snapshot_code(out_dir: str, installed: str | None = None) -> str:
    """Copy the node's source into DIR/code/tsched and return the folder for PYTHONPATH.

    Nodes restarted mid-run must run the code the run started with: a source edit landing
    between a node's first start and its restart would otherwise replay the same log
    through other rules and look like lost or rewritten history. `installed`: a folder
    holding `tsched/` as installed (e.g. an unpacked wheel of the compiled build, setup.py)
    to copy instead of the checkout."""
    return str(build_tree(os.path.join(out_dir, "code"), source=installed,
                          installed=installed is not None))


def tsnode_command() -> list[str]:
    return [sys.executable, "-m", "tsched.node.main"]


class NodeView:
    """What the nemesis and the runner ask of one node."""

    def __init__(self, cluster: "Cluster", node_id: str) -> None:
        self.cluster, self.id = cluster, node_id

    @property
    def alive(self) -> bool:
        return self.cluster.alive(self.id)

    @property
    def paused(self) -> bool:
        return self.id in self.cluster.paused


class Cluster(ProcessCluster):
    def __init__(self, out_dir: str, n_nodes: int = 3, failpoints: tuple[str, ...] = (),
                 hub: ProxyHub | None = None, shards: int = 1,
                 disks: SmallDisks | None = None, code: str | None = None) -> None:
        out = os.path.abspath(out_dir)
        os.makedirs(out, exist_ok=True)
        self.hub = hub or ProxyHub()
        self.rejoin_started: set[str] = set()     # started with --rejoin-empty (nemesis)
        self.failpoints = tuple(failpoints)
        self.code_path = snapshot_code(out, code)
        # the node's own election timeouts: the nemesis's fault lengths are chosen around them
        super().__init__(Path(out), n_nodes, name="jepsen", shards=shards, fast_raft=False)
        self.out_dir = out
        self.command = tsnode_command()
        self.nodes = {nid: NodeView(self, nid) for nid in self.ids}
        self.client_urls: dict[str, str] = {}     # node id -> proxied http://host:port
        self.direct_urls: dict[str, str] = {}     # node id -> http://host:port (checker)
        self._links()
        self.disks = disks          # small tmpfs data dirs for the disk_full fault
        if disks is not None:
            for nid in self.ids:
                if not disks.mount(nid, str(self.data_dir(nid))):
                    break

    def _links(self) -> None:
        dial: dict[str, list[str]] = {nid: [] for nid in self.ids}
        for shard in range(self.shards):
            for a in self.ids:
                for b in self.ids:
                    ra, rb = self.shard_raft(a, shard), self.shard_raft(b, shard)
                    if ra > rb:       # a dials b: put the proxy there
                        listen = self.hub.add(self._link_name(a, b, shard), rb)
                        dial[a].append(f"{rb}={listen}")
        for nid in self.ids:
            listen = self.hub.add(self.http_link(nid), self.http[nid])
            self.client_urls[nid] = f"http://{listen}"
            self.direct_urls[nid] = self.url(nid)
            self.set_clock_offset(nid, 0)
            self.node_env[nid] = {
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [self.code_path, os.environ.get("PYTHONPATH")])),
                "TSCHED_RAFT_DIAL": ",".join(dial[nid]),
                "TSCHED_CLOCK_OFFSET_FILE": self.clock_file(nid),
                "TSCHED_FAILPOINTS": ",".join(self.failpoints)}

    def clock_file(self, nid: str) -> str:
        return os.path.join(self.out_dir, f"clock-{nid}")

    def shard_raft(self, nid: str, shard: int) -> str:
        """The node's Raft address for `shard` (its base address + 100 * shard)."""
        host, port = self.raft[nid].rsplit(":", 1)
        return f"{host}:{int(port) + 100 * shard}"

    def _link_name(self, a: str, b: str, shard: int) -> str:
        # shard 0 keeps the single group's names: a run with one shard is unchanged
        return f"raft:{a}->{b}" + (f"#s{shard}" if shard else "")

    def raft_link(self, a: str, b: str, shard: int = 0) -> str:
        """The proxy carrying the pair's one connection of `shard` (named by dialler ->
        listener)."""
        d = self.dialer(a, b, shard)
        return self._link_name(d, b if d == a else a, shard)

    def dialer(self, a: str, b: str, shard: int = 0) -> str:
        return a if self.shard_raft(a, shard) > self.shard_raft(b, shard) else b

    def pair_links(self, a: str, b: str) -> list[tuple[str, str]]:
        """(link, dialler) of the pair's connection in every shard."""
        return [(self.raft_link(a, b, s), self.dialer(a, b, s)) for s in range(self.shards)]

    @staticmethod
    def http_link(nid: str) -> str:
        return f"http:{nid}"

    def links_between(self, group_a, group_b) -> list[str]:
        return sorted({link for a in group_a for b in group_b if a != b
                       for link, _ in self.pair_links(a, b)})

    def start_all(self) -> None:
        self.start()

    def stopped_on_damage(self, node_id: str) -> bool:
        """Its last process exited on damaged storage (tsnode's exit 76)."""
        proc = self.procs.get(node_id)
        return proc is not None and proc.poll() == STORAGE_CORRUPT_EXIT_CODE

    def start_node(self, node_id: str, *args: str) -> None:
        """A node that stopped on damaged storage comes back as an operator brings it back:
        emptied (`tsnode --rejoin-empty`). Started as it was, it would only stop again on
        the same damage, and a run could end with a majority gone for no fault of its own."""
        if self.stopped_on_damage(node_id) and "--rejoin-empty" not in args:
            args = (*args, "--rejoin-empty")
        if "--rejoin-empty" in args:
            self.rejoin_started.add(node_id)    # damaged until seen serving with no marker
        super().start_node(node_id, *args)

    def join_extra(self, nid: str, via: str) -> None:
        """Start a fresh node `nid` that joins through `via`'s API (the membership fault);
        it runs the frozen code, its links are not proxied, and it is not one of `ids`."""
        self.set_clock_offset(nid, 0)
        self.node_env[nid] = {**self.node_env[via], "TSCHED_RAFT_DIAL": "",
                              "TSCHED_CLOCK_OFFSET_FILE": self.clock_file(nid)}
        self.add_node(nid, via)
        self.forget(nid)

    def stop_extra(self, nid: str) -> None:
        if self.alive(nid):
            self.stop(nid)

    def set_clock_offset(self, nid: str, offset_ms: int) -> None:
        """Atomic replace, so the node never reads a half-written number."""
        path = self.clock_file(nid)
        with open(path + ".tmp", "w", encoding="ascii") as f:
            f.write(str(int(offset_ms)))
        os.replace(path + ".tmp", path)

    def close(self) -> None:
        try:
            self.stop_all()
        finally:
            try:
                super().close()
            finally:
                self.hub.stop()
                if self.disks is not None:
                    self.disks.unmount_all()
