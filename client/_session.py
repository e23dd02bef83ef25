"""A Worker's session (DESIGN 9, "Worker sessions"): the cluster gives a dead worker's
tasks back a few seconds after it last heard from it, not when their leases run out.

The worker opens its session as it starts and keeps it alive with a keepalive every third
of its timeout (`PUT /v1/sessions/{worker_id}`, to the leader when known: the leader is
where liveness is judged); its claims keep it alive too. A keepalive whose answer says the
session was created anew, when the worker had one, means the cluster had not heard from it
for its timeout (a partition, a long pause) and gave its tasks back: the worker heartbeats
at once, and the tasks the cluster took back are dropped as lost leases (their late
reports would be refused by fencing anyway). A stopping worker ends its session after it
gave its unstarted tasks back. A cluster that predates sessions answers 404 `no_route`: the
worker goes on without one (its tasks then wait for their leases, as before).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .client import AsyncClient
from .errors import ApiError

log = logging.getLogger("tsched.worker")

SESSION_TIMEOUT_S = 3.0   # a dead worker's tasks come back within about this
END_DEADLINE_S = 2.0      # a stopping worker waits this long for its session to end


class Session:
    def __init__(self, client: AsyncClient, worker_id: str, timeout_s: float | None,
                 heartbeat: Callable[[float], Awaitable[None]]) -> None:
        self.client, self.worker_id, self.timeout_s = client, worker_id, timeout_s
        self._heartbeat = heartbeat   # the worker's: heartbeats every held task now
        self.opened = False           # the cluster has answered a keepalive
        self.lost = 0                 # times the session was found expired

    async def run(self) -> None:
        """Keep the session alive until cancelled."""
        if self.timeout_s is None:
            return
        interval_s = self.timeout_s / 3
        while await self.keep(interval_s):
            await asyncio.sleep(interval_s)

    async def keep(self, budget_s: float) -> bool:
        """One keepalive; False when the cluster has no sessions (stop trying)."""
        assert self.timeout_s is not None, "run() keeps a session only with a timeout"
        try:
            answer = await self.client.keep_session(self.worker_id, self.timeout_s,
                                                    deadline_s=budget_s)
        except ApiError as exc:
            if (exc.details or {}).get("reason") == "no_route":
                log.warning("worker %s: the cluster has no worker sessions; a dead worker's "
                            "tasks wait for their leases", self.worker_id)
                return False
            log.debug("worker %s: session keepalive: %s", self.worker_id, exc)
            return True
        if isinstance(answer, dict) and answer.get("created") and self.opened:
            self.lost += 1
            log.warning("worker %s: the cluster had not heard from it for %g s and gave its "
                        "tasks back; it goes on with a new session", self.worker_id,
                        self.timeout_s)
            await self._heartbeat(budget_s)   # drops the tasks given back
        self.opened = True
        return True

    async def end(self) -> None:
        """End the session (a clean stop): best effort, a lost one expires by itself."""
        if not self.opened:
            return
        try:
            await self.client.end_session(self.worker_id, deadline_s=END_DEADLINE_S)
        except ApiError as exc:
            if exc.code != "not_found":
                log.info("worker %s: ending its session: %s", self.worker_id, exc)
        self.opened = False
