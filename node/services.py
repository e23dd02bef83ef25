"""The node's services that handlers use, one `Node` per app under the `NODE` app key."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import web

from tsched.node.clock import Clock
from tsched.node.config import ClusterConfig
from tsched.node.forwarding import Forwarder
from tsched.node.gcpolicy import GcPolicy
from tsched.node.ids import new_id
from tsched.node.raft.proposer import Proposer
from tsched.node.raft.replica import Replica
from tsched.node.raft.seq_watcher import SeqWatcher
from tsched.node.scheduling.claim_hub import ClaimHub
from tsched.node.scheduling.claimed_types import ClaimedTypes
from tsched.node.scheduling.session_watch import SessionWatch
from tsched.node.scheduling.worker_slots import WorkerSlots
from tsched.node.scheduling.timer import LeaderTimer
from tsched.node.topology import task_id_in

PROPOSE_TIMEOUT_S = 10.0      # a write waiting for its commit gives up after this (504)


@dataclass
class Node:
    """The services handlers use; one per app, held under NODE."""

    node_id: str
    config: ClusterConfig
    replica: Replica
    clock: Clock
    # Made by the app's startup context (app.py), None before it ran and in bare tests.
    proposer: Proposer | None = None
    forwarder: Forwarder | None = None
    claims: ClaimHub | None = None
    timer: LeaderTimer | None = None
    sessions: SessionWatch | None = None   # worker sessions' liveness, at the leader
    gc_policy: GcPolicy | None = None   # tsnode installs one; tests may not
    seqs: SeqWatcher = field(default_factory=lambda: SeqWatcher())
    propose_timeout_s: float = PROPOSE_TIMEOUT_S
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)   # set on SIGTERM
    shard: int | None = None    # this process's shard when the cluster has several
    backup_in_progress: bool = False   # GET /v1/cluster/backup: one at a time (api/backup.py)
    # The task types workers asked for while this node led: a hint, not replicated.
    claimed_types: ClaimedTypes = field(default_factory=ClaimedTypes)
    # The workers' busy and idle slots their claims and heartbeats reported here as the
    # leader (tsched_worker_slots): advisory, not replicated.
    worker_slots: WorkerSlots = field(default_factory=WorkerSlots)

    def new_task_id(self) -> str:
        """A fresh task id; with shards its first two hex digits name this shard, so any
        node routes the id (DESIGN.md section 13)."""
        if self.shard is None:
            return new_id()
        return task_id_in(self.shard, new_id())

    @property
    def stopping(self) -> bool:
        """SIGTERM arrived: long polls end at once, so workers go to other nodes."""
        return self.stop_event.is_set()

    def leader_url(self) -> str | None:
        leader = self.replica.leader_id()
        if leader is None:
            return None
        try:
            return self.config.node(leader).url
        except ValueError:
            return None


NODE = web.AppKey("node", Node)


def node_of(request: web.Request) -> Node:
    return request.app[NODE]
