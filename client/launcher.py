"""Local clusters on this machine: loopback ports, the cluster file, `tsnode` processes.

The one launcher of the project: `tsctl dev` (dev.py) runs it, and so do the test
harness (tests/harness/cluster.py) and the benchmarks (bench/lib/cluster.py).

- ports: `free_port`, `free_ports`, and checked port blocks of whole clusters
  (`free_shard_ports`, `node_addresses`), below the ephemeral range;
- the file: `cluster_toml`, the text of a local cluster's cluster.toml.

Nodes are started as subprocesses (`tsnode`): the client never imports the node.
"""
from __future__ import annotations

import random
import socket

PORTS_FLOOR = 10_000


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
