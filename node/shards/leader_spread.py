"""Shard leaders spread over the nodes (DESIGN.md section 13): no node leads more than
ceil(S / N) shards once the cluster is stable.

The supervisor and each of its shard processes talk over the process's stdin and stdout:
the shard process writes one JSON line of status (`role`, `leader`, `term`) every
`STATUS_S`, and reads commands (`transfer <node id>`); end of file on its stdin means the
supervisor is gone, and the process stops. The supervisor reads the leaders of its local
shards, and when this node leads more than its share for two checks in a row, it asks the
process of one shard it leads to hand over to that shard's replica leading the fewest.
Only an over-loaded node moves its own shards, so nodes never undo each other's moves.
"""
from __future__ import annotations

import asyncio
import logging
import math
import sys

import orjson

from tsched.node.services import Node

log = logging.getLogger("tsched.node.spread")

STATUS_S = 1.0              # how often a shard process reports its role
SPREAD_CHECK_S = 5.0        # how often the supervisor looks at the spread
STATUS_LINE_BYTES_MAX = 4096


# --- in a shard process ----------------------------------------------------------------------

async def shard_channel(node: Node, stop: asyncio.Event) -> None:
    """Report this replica's role on stdout; obey `transfer` lines on stdin; stop at EOF."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STATUS_LINE_BYTES_MAX)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    report = loop.create_task(_report(node, stop))
    try:
        while not stop.is_set():
            line = await reader.readline()
            if not line:
                log.warning("event=supervisor_gone shard_process_stopping=true")
                stop.set()
                break
            _command(node, line.decode(errors="replace").split())
    finally:
        report.cancel()


def _command(node: Node, words: list[str]) -> None:
    if len(words) == 2 and words[0] == "transfer":
        if node.replica.is_ready_leader():
            try:
                node.replica.transfer_leadership(words[1])
                log.info("event=leadership_transfer to=%s reason=leader_spread", words[1])
            except ValueError as e:
                log.warning("event=leadership_transfer_refused reason=%s", e)


async def _report(node: Node, stop: asyncio.Event) -> None:
    while not stop.is_set():
        leader = node.replica.leader_id()
        line = {"role": "leader" if node.replica.is_ready_leader() else "other",
                "leader": leader, "term": node.replica.term}
        try:
            sys.stdout.buffer.write(orjson.dumps(line) + b"\n")
            sys.stdout.buffer.flush()
        except (BrokenPipeError, OSError):
            stop.set()
            return
        await asyncio.sleep(STATUS_S)


# --- in the supervisor -----------------------------------------------------------------------

def parse_status(line: bytes) -> dict | None:
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and "leader" in doc else None


def plan_move(node_id: str, leaders: dict[int, str | None], replicas: dict[int, list[str]],
              shards: int, nodes: int) -> tuple[int, str] | None:
    """(shard, new leader) when `node_id` leads more than ceil(shards / nodes) of the
    shards it sees; the shard goes to its replica that leads the fewest. None otherwise."""
    if any(v is None for v in leaders.values()):
        return None          # an election is under way: not stable
    share = math.ceil(shards / nodes)
    counts: dict[str | None, int] = {}     # no None among the leaders by now
    for leader in leaders.values():
        counts[leader] = counts.get(leader, 0) + 1
    if counts.get(node_id, 0) <= share:
        return None
    best = None
    for shard in sorted(s for s, v in leaders.items() if v == node_id):
        for other in replicas[shard]:
            if other == node_id or counts.get(other, 0) + 1 > share:
                continue
            key = (counts.get(other, 0), shard, other)
            if best is None or key < best:
                best = key
    return None if best is None else (best[1], best[2])


class Spreader:
    """The supervisor's side: the latest status of each local shard, and the moves."""

    def __init__(self, node_id: str, shards: int, nodes: int,
                 replicas: dict[int, list[str]]) -> None:
        self.node_id, self.shards, self.nodes = node_id, shards, nodes
        self.replicas = replicas
        self.status: dict[int, dict] = {}
        self._over = 0       # consecutive checks that found this node over its share

    def note(self, shard: int, line: bytes) -> None:
        doc = parse_status(line)
        if doc is not None:
            self.status[shard] = doc

    def forget(self, shard: int) -> None:
        self.status.pop(shard, None)

    def leader_of(self, shard: int) -> str | None:
        """The node id a local shard's replica last named as its leader (the router sends
        claims there)."""
        status = self.status.get(shard)
        leader = status.get("leader") if status is not None else None
        return leader if isinstance(leader, str) else None

    def check(self) -> tuple[int, str] | None:
        if len(self.status) < len(self.replicas):
            self._over = 0
            return None
        leaders = {s: st.get("leader") for s, st in self.status.items()}
        move = plan_move(self.node_id, leaders, self.replicas, self.shards, self.nodes)
        self._over = self._over + 1 if move else 0
        if self._over < 2:
            return None
        self._over = 0
        return move
