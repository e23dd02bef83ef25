"""The services scheduling/ takes, for its tests: what `services.Node` holds that a claim,
a submit or the session watch reads, without the app (no tests here)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from tsched.node import present
from tsched.node.clock import Clock
from tsched.node.raft.proposer import Proposer
from tsched.node.raft.replica import Replica
from tsched.node.scheduling.claim_hub import ClaimHub
from tsched.node.scheduling.claimed_types import ClaimedTypes


@dataclass
class Services:
    replica: Replica
    node_id: str = "n1"
    clock: Clock = field(default_factory=Clock)
    proposer: Proposer | None = None
    claims: ClaimHub | None = None
    timer: Any = None
    propose_timeout_s: float = 10.0
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    claimed_types: ClaimedTypes = field(default_factory=ClaimedTypes)

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()


def proposing(replica: Replica) -> Services:
    """Services of `replica` with a proposer on the running loop."""
    return Services(replica=replica, proposer=Proposer(
        replica, asyncio.get_running_loop(), render=present.result,
        render_minimal=present.minimal_result))
