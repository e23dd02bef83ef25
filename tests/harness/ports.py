"""Loopback ports for tests and benchmarks: the one `free_port`, and the checked port
blocks of whole clusters (`node_addresses`)."""
from __future__ import annotations

import os
import random
import socket

PORTS_FLOOR = 10_000


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1, free a moment ago: every socket is held
    until all are bound, as ports drawn one at a time can repeat (seen in a test run)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_shard_ports(nodes: int, shards: int) -> tuple[list[int], list[int]]:
    """(base Raft ports, HTTP ports) of a sharded cluster's nodes, every shard's Raft and
    internal HTTP port (base + k + 100 s, and 50 above) free, HTTP ports just past the
    last shard. All below the ephemeral range: a sharded node makes many outgoing
    connections, and one of them must not take a killed node's port before it restarts."""
    span = 100 * shards + nodes
    low, high = _worker_range(PORTS_FLOOR, _ephemeral_low() - 1, span)
    for _ in range(500):
        base = random.randint(low, high)
        rafts = [base + k for k in range(nodes)]
        https = [base + 100 * shards + k for k in range(nodes)]
        ports = [p + 100 * s + off for p in rafts for s in range(shards) for off in (0, 50)]
        if all(_is_free(p) for p in ports + https):
            return rafts, https
    raise RuntimeError("no free block of shard ports on loopback")


def _worker_range(low: int, top: int, span: int) -> tuple[int, int]:
    """The bases this test process may give a block of `span` ports, all within its own
    slice of [low, top]. A block is
    checked free, then bound when its nodes start: two pytest-xdist workers checking at
    the same moment could pick overlapping blocks, and one cluster's poller then spoke
    HTTP to the other's Raft port (seen in a test run). Each worker picks from its own."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or not worker[2:].isdigit() or count <= 1:
        return low, top - span
    size = (top - low + 1) // count
    start = low + int(worker[2:]) % count * size
    return start, start + size - 1 - span


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def node_addresses(ids: list[str], shards: int) -> tuple[dict[str, str], dict[str, str]]:
    """({id: raft host:port}, {id: http host:port}) for a cluster of `shards` shards.

    One checked block below the ephemeral range for every shard count: ports drawn one at
    a time from the OS can repeat within a cluster, and an ephemeral one can be taken by an
    outgoing connection before its node binds it (both were seen in test runs)."""
    rafts, https = free_shard_ports(len(ids), shards)
    return ({i: f"127.0.0.1:{p}" for i, p in zip(ids, rafts)},
            {i: f"127.0.0.1:{p}" for i, p in zip(ids, https)})
