"""Graceful handoff: a leader asked to stop hands its leadership over first.

Without it, a SIGTERM'd leader simply goes away and the followers notice only when their
election timeout runs out (1-2.5 s, more under load): no task is claimed or completed in
that time. `hand_over` asks Raft to transfer leadership (pysyncobj's TimeoutNow) to the
most caught-up follower, again every `RETRY_S` while none is fully caught up (under load
the followers' match index trails the leader's log by an entry in flight), and returns
once another node leads, or after `timeout_s`, when the node stops anyway (a rolling
restart must not hang on a cluster that cannot elect). It gives up sooner, after
`ALONE_S`, when no peer is connected at all: nobody could take over (the whole cluster is
stopping at once, or this leader is cut off), and waiting out the timeout would only delay
the stop (5 s at the leader of every `tsctl dev` Ctrl-C).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

log = logging.getLogger(__name__)


class Leading(Protocol):
    """What a handoff needs of the replica (`replica.Replica`)."""

    self_id: str

    def leader_id(self) -> str | None: ...

    def leader_committed_in_its_term(self) -> bool: ...

    def is_leader_role(self) -> bool: ...

    def transfer_leadership(self, to: str | None = None) -> None: ...

    @property
    def connected_peers(self) -> list[str]: ...

HANDOFF_S = 5.0       # at most this long between SIGTERM and stopping, for the handoff
RETRY_S = 0.02        # a transfer is asked again this often while no follower is caught up
# No peer connected for this long: no handoff is possible. Longer than a peer's reconnect
# (the production connection retry is 1 s; a restarted follower reconnects within it).
ALONE_S = 1.0


async def hand_over(replica: Leading, timeout_s: float = HANDOFF_S) -> str | None:
    """Hand leadership over if this node leads; the new leader's id, or None.

    Done once another node leads and this one has seen it commit an entry of its term
    (its barrier), so it is ready to serve when this one stops."""
    me = replica.self_id
    if replica.leader_id() != me:
        return None
    started = time.monotonic()
    deadline = started + timeout_s
    alone = _Alone(replica)
    while time.monotonic() < deadline:
        if alone.too_long():
            log.info("event=handoff_skipped reason=no_peer_connected after_ms=%d",
                     (time.monotonic() - started) * 1000)
            return None
        leader = replica.leader_id()
        if leader is not None and leader != me:
            if replica.leader_committed_in_its_term():
                log.info("event=handoff_done to=%s after_ms=%d", leader,
                         (time.monotonic() - started) * 1000)
                return leader
        elif replica.is_leader_role():
            replica.transfer_leadership()
        await asyncio.sleep(RETRY_S)
    log.warning("event=handoff_timeout after_s=%.1f leader=%s: stopping anyway",
                timeout_s, replica.leader_id())
    return None


class _Alone:
    """How long the replica has had no connected peer."""

    def __init__(self, replica: Leading) -> None:
        self._replica = replica
        self._since: float | None = None

    def too_long(self) -> bool:
        """True once no peer has been connected for ALONE_S."""
        now = time.monotonic()
        if self._replica.connected_peers:
            self._since = None
        elif self._since is None:
            self._since = now
        return self._since is not None and now - self._since >= ALONE_S


async def transfer_to(replica: Leading, to: str | None, timeout_s: float = HANDOFF_S) -> str | None:
    """Ask for a transfer of leadership to `to` (None: the most caught-up peer), again every
    RETRY_S while this node still leads, until another node leads or `timeout_s` has passed;
    the new leader's id, or None.

    pysyncobj refuses, silently, a target that has not acknowledged the leader's last entry,
    and an operator's transfer is preceded by its audit entry, committed by a majority that
    need not include the target: asked once, the transfer would often be refused."""
    me = replica.self_id
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader = replica.leader_id()
        if leader is not None and leader != me:
            return leader
        if replica.is_leader_role():
            replica.transfer_leadership(to)
        await asyncio.sleep(RETRY_S)
    log.warning("event=transfer_not_done to=%s after_s=%.1f leader=%s", to, timeout_s,
                replica.leader_id())
    return None

