"""Loopback ports for tests: the product's primitives (tsched.client.launcher: `free_port`,
`free_ports`, checked port blocks of whole clusters), and the harness's one policy on top:
each pytest-xdist worker picks its clusters' blocks from a slice of the range of its own."""
from __future__ import annotations

import os

from tsched.client.launcher import (
    PORTS_FLOOR, ephemeral_low, free_port, free_ports, is_free, shard_ports_span)
from tsched.client.launcher import free_shard_ports as _free_shard_ports
from tsched.client.launcher import node_addresses as _node_addresses

__all__ = ["PORTS_FLOOR", "free_port", "free_ports", "free_shard_ports", "node_addresses"]
_is_free = is_free
_ephemeral_low = ephemeral_low


def free_shard_ports(nodes: int, shards: int) -> tuple[list[int], list[int]]:
    """(base Raft ports, HTTP ports) of a sharded cluster's nodes (the launcher's checked
    block), picked from this test process's own slice of the range."""
    return _free_shard_ports(nodes, shards, _bases(nodes, shards))


def node_addresses(ids: list[str], shards: int) -> tuple[dict[str, str], dict[str, str]]:
    """({id: raft host:port}, {id: http host:port}) for a cluster of `shards` shards (the
    launcher's checked block), picked from this test process's own slice of the range."""
    return _node_addresses(ids, shards, _bases(len(ids), shards))


def _bases(nodes: int, shards: int) -> tuple[int, int]:
    return _worker_range(PORTS_FLOOR, ephemeral_low() - 1, shard_ports_span(nodes, shards))


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
