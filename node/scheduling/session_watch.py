"""Worker sessions at the leader (DESIGN.md section 9, "Worker sessions").

The replicated state records which workers have a session and their timeouts
(statemachine/sessions.py); whether each is alive is what the leader heard, by its own
monotonic clock, and nothing else: a worker's claims (forwarded ones included: every claim
reaches the leader) and its keepalives (`PUT /v1/sessions/{worker_id}`, forwarded to the
leader by a follower) call `seen`. Heartbeats and completions are not counted: they may
reach the leader only as Raft entries.

Every ROUND_S the leader looks at each session: one it has not heard from for its timeout
is ended by `EndSession(expired=True)`, through the log, which gives the worker's tasks
back at once on every replica. A leader that has just taken over heard nothing yet: it
starts every session at a fresh full timeout (as ZooKeeper's leaders do), so a failover
never expires everyone at once; a worker has that long to reach the new leader. A round
that comes late (this process held by a GC pause, CPU starvation or SIGSTOP) moves every
session's last-heard time forward by the lateness: a leader deaf for a while must not take
the silence for its workers' (as the Raft stall clock does for the leader's peers).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from tsched.statemachine import commands as c

from tsched.node.clock import Clock
from tsched.node.errors import ApiError
from tsched.node.ids import new_id
from tsched.node.raft.commit import Proposing, propose_one
from tsched.node.raft.replica import Replica

log = logging.getLogger("tsched.node.sessions")

ROUND_S = 0.25          # how often the leader looks for silent workers
LATE_S = 1.0            # a round later than this by the monotonic clock: this process was held


class SessionServices(Proposing, Protocol):
    """What the watch needs of the node's services (`services.Node` is one)."""

    node_id: str
    replica: Replica
    clock: Clock


class SessionWatch:
    def __init__(self, node: SessionServices) -> None:
        self.node = node
        self._heard: dict[str, float] = {}    # worker id -> monotonic time last heard
        self._term: int | None = None         # the term this node leads in (None: follows)
        self._ending: set[str] = set()        # EndSession proposed, not yet answered
        self._last_round = time.monotonic()
        self._task: asyncio.Task | None = None
        self.expired = 0                      # sessions this node ended (metrics, tests)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="session-watch")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def seen(self, worker_id: str) -> None:
        """The worker spoke to this node (a claim, a keepalive). Kept only while it leads."""
        if self._term is not None:
            self._heard[worker_id] = time.monotonic()

    def silent_s(self, worker_id: str) -> float | None:
        """Seconds since the leader last heard from the worker (None: not leading, or no
        session known yet)."""
        heard = self._heard.get(worker_id)
        return None if heard is None else max(0.0, time.monotonic() - heard)

    async def _run(self) -> None:
        while True:
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("event=session_round_failed")
            await asyncio.sleep(ROUND_S)

    async def _round(self) -> None:
        now = time.monotonic()
        late_s, self._last_round = now - self._last_round - ROUND_S, now
        replica = self.node.replica
        if not replica.is_ready_leader():
            self._term = None
            self._heard.clear()
            return
        if self._term != replica.term:   # newly leading: every session starts afresh
            self._term = replica.term
            self._heard.clear()
        elif late_s > LATE_S:
            for worker_id in self._heard:
                self._heard[worker_id] += late_s
        for worker_id in self._silent(now):
            self._ending.add(worker_id)
            asyncio.get_running_loop().create_task(self._end(worker_id))

    def _silent(self, now: float) -> list[str]:
        """The sessions silent past their timeouts; forgets workers that have none."""
        with self.node.replica.read() as sm:
            timeouts = {w: s.timeout_ms for w, s in sm.sessions.items()}
        heard = {w: self._heard.get(w, now) for w in timeouts}   # new ones start now
        self._heard = heard
        return [w for w, t in heard.items()
                if (now - t) * 1000 > timeouts[w] and w not in self._ending]

    async def _end(self, worker_id: str) -> None:
        silent_s = self.silent_s(worker_id)
        cmd = c.EndSession(request_id=new_id(), now_ms=self.node.clock.now_ms(),
                           worker_id=worker_id, expired=True)
        try:
            answer, _ = await propose_one(self.node, cmd)
        except ApiError as e:
            if e.code != "not_found":   # ended meanwhile (the worker stopped): nothing to do
                log.warning("event=session_expire_failed worker=%s code=%s",
                            worker_id, e.code)
            return
        finally:
            self._ending.discard(worker_id)
        self.expired += 1
        given = answer.get("given_back") if isinstance(answer, dict) else None
        log.warning("event=session_expired worker=%s silent_s=%.1f given_back=%s",
                    worker_id, silent_s or 0.0, given)
