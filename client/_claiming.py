"""The worker's claiming: keep claims open for the free slots of the window, and let
finished outcomes ride on them while claims come back full (see worker.py).

A mixin of Worker (_worker.py): the state it reads and moves is the Worker's.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from tsched.statemachine.tiers import TierError, parse_range

from . import otel
from ._outbox import LINGER_S
from .errors import ApiError, Unavailable

if TYPE_CHECKING:
    from ._jobs import Job
    from ._outbox import Outbox
    from ._window import Window
    from .client import AsyncClient

log = logging.getLogger("tsched.worker")

CLAIM_WAIT_S_MAX = 20.0      # long-poll length
# A claim carrying completions does not wait for work: their answers (and the worker's
# bookkeeping of those tasks) must not wait for a poll. Claims carry only while claims come
# back full, so one that finds nothing (the backlog's end) is followed by a plain claim,
# which long-polls. It waited up to 0.2 s before: the last completions of a drained backlog
# were answered 0.2 s late (bench/notes/2026-12-06-worker-pipeline.md).
CARRY_WAIT_S = 0.0
CARRY_ITEMS_MAX = 500        # completions on one claim (the API takes up to 1,000)
ERROR_PAUSE_S = 1.0          # after a refused claim (bad token, limits), before trying again
UNSERVABLE_CODES = frozenset({"too_large", "invalid_argument"})   # a result the cluster refuses


class Claiming:
    """Worker's claim loop. The state below is the Worker's (set in its __init__ and
    run_async); declared here so that the claiming reads as typed code on its own."""

    handlers: dict[str, Callable]
    worker_id: str
    concurrency: int
    _report_slots: bool
    _jobs: dict[str, tuple[Job, asyncio.Future]]
    lease_s: float
    prefetch_ms: int
    priorities: tuple[int, int] | None
    wait_s: float
    _window: Window
    _held: int
    _reserved: int
    _traced: bool
    _recording = False   # a tracer provider is set (otel.provider_set): asked per claim
    _carry: bool
    _stopping: asyncio.Event
    _slot_free: asyncio.Event
    _outbox: Outbox
    _client: AsyncClient

    def _start(self, task: dict) -> None:
        raise NotImplementedError("Worker starts the claimed tasks")

    async def _claim_loop(self) -> None:
        """Keeps claims open for the free slots of the window, so a claim round trip
        overlaps the handlers' work instead of following it."""
        inflight: set[asyncio.Task] = set()
        self._reserved = 0   # slots promised to claims in flight
        try:
            while not self._stopping.is_set():
                window = self._window
                free = window.size - self._held - self._reserved
                want = window.claim_size(free, len(inflight)) \
                    if len(inflight) < window.claims_open_max else 0
                if want <= 0:
                    self._slot_free.clear()
                    await self._slot_free.wait()
                    continue
                self._reserved += want
                claim = asyncio.create_task(self._claim_once(want))
                inflight.add(claim)
                claim.add_done_callback(lambda done: self._claim_ended(inflight, done))
        finally:
            for claim in inflight:
                claim.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)

    def _claim_ended(self, inflight: set, claim: asyncio.Task) -> None:
        # Wake the claim loop only once the claim has left `inflight`: the wake-up from
        # _claim_once's own finally can run first, see the claim still in flight and go
        # back to sleep, with nothing left to wake it when no task is held.
        inflight.discard(claim)
        self._slot_free.set()

    async def _claim_once(self, want: int) -> None:
        # Completions ride on claims only while there is a backlog (claims come back full):
        # under a trickle they would only make each claim's entry and commit longer.
        carry = self._carry and self._window.backlog
        self._outbox.linger_s = LINGER_S if carry else 0.0
        carried = self._outbox.take(CARRY_ITEMS_MAX) if carry else []
        started = time.monotonic()
        tasks: list = []
        try:
            tasks = await self._claim(want, carried)
            carried = []
        except Unavailable as exc:
            log.warning("claim: %s", exc)   # the client already backed off for its deadline
        except ApiError as exc:
            if self.slots_refused(exc):
                pass   # sent again at once, without the report
            elif carried and exc.code in UNSERVABLE_CODES:
                # A completion the cluster refuses refused the whole claim; they go apart
                # (one by one if need be). A node that predates them names the field.
                if "completions" in (exc.details or {}).get("fields", ()):
                    log.info("this cluster takes no completions on claims: sending them apart")
                    self._carry = False
            else:
                log.error("claim refused: %s", exc)
                self._outbox.give_back(carried)    # not held up by the pause
                carried = []
                await self._pause(ERROR_PAUSE_S)
        finally:
            self._outbox.give_back(carried)     # unanswered: sent again on their own
            self._reserved -= want
            self._slot_free.set()
        self._window.claim_answered(time.monotonic() - started, len(tasks), want)
        if tasks and self._traced and not self._recording:
            self._recording = otel.provider_set()   # once per claim: it reads the environment
        for task in tasks:
            self._start(task)

    def slots_refused(self, exc: ApiError) -> bool:
        """A node that predates slot reports refuses the field: stop sending them (the
        autoscaling gauge then lacks this worker) rather than the claims or heartbeats."""
        if self._report_slots and exc.code == "invalid_argument" and \
                "slots" in (exc.details or {}).get("fields", ()):
            log.info("this cluster takes no slot reports: claiming without them")
            self._report_slots = False
            return True
        return False

    def slots(self, named: bool = False) -> dict[str, Any] | None:
        """This worker's slots as its claims and heartbeats report them (`named`: with its
        id and task types, as a heartbeat needs): `concurrency` in all, busy ones by the
        task type their handler runs (bounded by the total). None once refused."""
        if not self._report_slots:
            return None
        busy: dict[str, int] = {}
        left = self.concurrency
        for job, _ in self._jobs.values():
            if job.started and not job.returned and left > 0:
                busy[job.ctx.task_type] = busy.get(job.ctx.task_type, 0) + 1
                left -= 1
        out: dict[str, Any] = {"total": self.concurrency, "busy": busy}
        if named:
            out.update(worker_id=self.worker_id, task_types=sorted(self.handlers))
        return out

    async def _claim(self, want: int, carried: list) -> list[dict]:
        types = sorted(self.handlers)
        if not carried:
            return await self._client.claim(
                self.worker_id, types, wait_s=self.wait_s, minimal=True, max_tasks=want,
                lease_s=self.lease_s, prefetch_ms=self.prefetch_ms,
                priorities=self.priorities, slots=self.slots()) or []
        body = await self._client.claim_and_complete(
            self.worker_id, types, [item for item, _ in carried],
            wait_s=min(self.wait_s, CARRY_WAIT_S), minimal=True, max_tasks=want,
            lease_s=self.lease_s, prefetch_ms=self.prefetch_ms, priorities=self.priorities,
            slots=self.slots())
        answers = body.get("completions") if isinstance(body, dict) else None
        answers = answers if isinstance(answers, list) else []
        self._outbox.answered(carried, answers)
        self._outbox.give_back(carried[len(answers):])
        return (body.get("tasks") if isinstance(body, dict) else None) or []

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds` unless the worker is asked to stop first."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except asyncio.TimeoutError:
            pass


def check_priorities(value: Any) -> tuple[int, int] | None:
    """A worker's priority range: None (every priority), `(lo, hi)`, `"lo-hi"` (a single
    `"n"` is `n-n`) or tier names of the default table (`"critical,high"` is 0-3; DESIGN
    5.1), inclusive, 0 <= lo <= hi <= 10. ValueError otherwise."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return parse_range(value)
        except TierError as e:
            raise ValueError(str(e)) from None
    if not isinstance(value, (tuple, list)) or len(value) != 2 or not all(
            type(v) is int for v in value) or not 0 <= value[0] <= value[1] <= 10:
        raise ValueError(f"priorities must be (lo, hi) with 0 <= lo <= hi <= 10, got {value!r}")
    return (value[0], value[1])
