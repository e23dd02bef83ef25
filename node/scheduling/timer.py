"""The leader's timer (DESIGN.md section 4).

From the replicated state the leader knows the next instant that matters: a lease expiry,
timeout, backoff end or eviction (`next_timer_ms`), a schedule fire (`next_fire_ms`), and the
earliest due task some waiting claim could take (`next_due_ms`). It sleeps exactly until the
earliest of them, re-computing after every applied batch (which may change them), then
proposes `Tick` / `Fire` commands or wakes the claim dispatcher. No polling interval.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from tsched.statemachine import commands as c

from tsched.node.scheduling import firing
from tsched.node.errors import ApiError
from tsched.node.ids import new_id as _new_id
from tsched.node.raft.commit import propose
from tsched.node.scheduling.claim_hub import HubServices

log = logging.getLogger("tsched.node.timer")

FOLLOWER_RECHECK_S = 0.25   # while not the ready leader: how often to look again
# The longest the leader's timer sleeps. Its delays are computed from the wall clock, and
# the sleep runs on the monotonic one: after a step of the wall clock (NTP, an operator) it
# must look again soon, or a due fire waits out a delay computed on the old time (a leader
# whose clock was 20 s behind slept 20 s past its heal in the fault harness).
SLEEP_S_MAX = 1.0
FIRES_PER_ROUND_MAX = 100
# Fires are proposed this long before their time: the occurrence's task (run_at = the fire
# time) then exists when the fire time comes, so a waiting worker gets it after one Raft
# round (the claim) instead of two (the fire, then the claim). Short enough that an
# overlap decision taken early is still about the occurrence that is running.
FIRE_LEAD_MS = 200


class TimerServices(HubServices, Protocol):
    """What the timer needs of the node's services (`services.Node` is one)."""

    shard: int | None


class LeaderTimer:
    def __init__(self, node: TimerServices) -> None:
        self.node = node
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        # Instants already acted on: a due instant that stays due after acting on it (a
        # tenant at its cap, a tick that changed nothing) must not spin the loop.
        self._done_tick_ms: int | None = None
        # Fires: (instant, applied seq) acted on. Many schedules can share one instant and
        # a round proposes at most FIRES_PER_ROUND_MAX of them, so the same instant is acted
        # on again once the state has moved on (each applied Fire advances its schedule).
        self._done_fire: tuple[int, int] | None = None
        self._done_due_ms: int | None = None
        self._specs = firing.SpecCache()
        self.ticks = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="leader-timer")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def state_changed(self) -> None:
        """Called after every applied batch and when waiters change."""
        self._changed.set()

    async def _run(self) -> None:
        while True:
            try:
                delay_s = await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("event=timer_round_failed node=%s", self.node.node_id)
                delay_s = FOLLOWER_RECHECK_S
            await self._until_changed(delay_s)
            self._changed.clear()

    async def _until_changed(self, delay_s: float | None) -> None:
        """Until `state_changed` or `delay_s` (None: no limit). asyncio.wait, not wait_for:
        in Python 3.11 wait_for returns normally when the event is set in the iteration that
        cancels it, and a cancel lost so made `close()` wait forever (the state no longer
        changes once the app is closing)."""
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({changed}, timeout=delay_s)
        finally:
            changed.cancel()

    def _instants(self) -> tuple[int | None, int | None, int | None]:
        hub = self.node.claims
        groups = hub.due_groups() if hub is not None else []
        with self.node.replica.read() as sm:
            tick_ms = sm.next_timer_ms()
            fire_ms = sm.next_fire_ms()
            if fire_ms is not None:
                fire_ms -= FIRE_LEAD_MS
            dues = []
            for types, tenant, prefetch_ms in groups:
                due = sm.next_due_ms(types, tenant)
                if due is not None:
                    dues.append(due - prefetch_ms)
        return tick_ms, fire_ms, min(dues) if dues else None

    async def _round(self) -> float | None:
        """Act on what is due; the seconds until the next instant (None: none known)."""
        if not self.node.replica.is_ready_leader():
            self._done_tick_ms = self._done_due_ms = self._done_fire = None
            if self.node.claims is not None:  # deposed or cut off: waits go to the new leader
                self.node.claims.check_leadership()
            return FOLLOWER_RECHECK_S
        now = self.node.clock.now_ms()
        tick_ms, fire_ms, due_ms = self._instants()
        hub = self.node.claims   # not None when due_ms is: a due claim waits in it
        if due_ms is not None and due_ms <= now and due_ms != self._done_due_ms \
                and hub is not None:
            self._done_due_ms = due_ms
            # New work: a waiter whose last Claim came back empty may take it (woken
            # without new_work, it would sit out its whole wait_s).
            hub.wake(new_work=True)
        if tick_ms is not None and tick_ms <= now and tick_ms != self._done_tick_ms:
            self._done_tick_ms = tick_ms
            if await self._propose([c.Tick(request_id=_new_id(), now_ms=now)]):
                self.ticks += 1
            else:
                self._done_tick_ms = None
        fire_key = None if fire_ms is None else (fire_ms, self.node.replica.applied_seq)
        if fire_key is not None and fire_key[0] <= now and fire_key != self._done_fire:
            self._done_fire = fire_key
            if not await self._fire(now):
                self._done_fire = None
        future = [t for t in (tick_ms, fire_ms, due_ms) if t is not None and t > now]
        if not future:
            return None
        return min((min(future) - now) / 1000, SLEEP_S_MAX)

    async def _fire(self, now: int) -> bool:
        with self.node.replica.read() as sm:
            cmds = firing.due_fire_commands(sm, now, max_fires=FIRES_PER_ROUND_MAX,
                                            cache=self._specs, lead_ms=FIRE_LEAD_MS,
                                            shard=self.node.shard)
        return await self._propose(cmds) if cmds else True

    async def _propose(self, cmds: list) -> bool:
        try:
            await propose(self.node, cmds)
            return True
        except ApiError as e:
            log.warning("event=timer_propose_failed node=%s code=%s", self.node.node_id, e.code)
            return False
