"""The worker's progress reports (`ctx.progress`, DESIGN 9): each task's latest report goes
out with a heartbeat, at most once a PROGRESS_REPORT_S per task.

A mixin of Worker (_worker.py): the state it reads is the Worker's.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from .errors import ApiError

if TYPE_CHECKING:
    from ._jobs import Job
    from .client import AsyncClient

log = logging.getLogger("tsched.worker")

PROGRESS_REPORT_S = 1.0      # a task's progress goes out at most this often (the latest wins)


class Progressing:
    """Worker's progress sender. The state below is the Worker's (set in its __init__ and
    _serve); declared here so that this reads as typed code on its own."""

    lease_s: float
    _loop: asyncio.AbstractEventLoop | None
    _jobs: dict[str, tuple[Job, asyncio.Future]]
    _client: AsyncClient
    _progress_due: asyncio.Event
    _progress_refused: bool = False

    def _apply_heartbeat(self, job: Job, answer: Any, now: float) -> None:
        raise NotImplementedError("Worker applies a heartbeat's answer")

    def slots(self, named: bool = False) -> dict[str, Any] | None:
        raise NotImplementedError("Claiming reports the worker's slots")

    def slots_refused(self, exc: ApiError) -> bool:
        raise NotImplementedError("Claiming says when a node refuses slot reports")

    def _progressed(self) -> None:
        """A handler reported progress (from its thread or the loop): wake the sender."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._progress_due.set)
            except RuntimeError:
                pass   # the loop closed in between: nobody left to tell

    async def _progress_loop(self) -> None:
        """Sends each task's latest progress with a heartbeat, at most once a
        PROGRESS_REPORT_S per task; a report that comes sooner waits for its turn."""
        wait_s: float | None = None
        while True:
            try:
                await asyncio.wait_for(self._progress_due.wait(), wait_s)
            except asyncio.TimeoutError:
                pass
            self._progress_due.clear()
            wait_s = await self._progress_once()

    async def _progress_once(self) -> float | None:
        """Send the reports that are due; seconds until the next one is, or None."""
        now, due, wait_s = time.monotonic(), [], None
        if self._progress_refused:   # a node that predates progress reports refused one
            return None
        for job, _ in list(self._jobs.values()):
            if job.progress is None or job.lost or job.reported:
                continue
            left_s = job.progress_sent_at + PROGRESS_REPORT_S - now
            if left_s <= 0:
                due.append((job, job.progress))
                job.progress, job.progress_sent_at = None, now
            else:
                wait_s = left_s if wait_s is None else min(wait_s, left_s)
        if due:
            await self._send_progress(due)
        return wait_s

    async def _send_progress(self, due: list[tuple[Job, tuple[float, str]]]) -> None:
        items = [{"task_id": j.ctx.task_id, "fencing_token": j.ctx.fencing_token,
                  "lease_s": self.lease_s,
                  "progress": {"fraction": fraction, "message": message}}
                 for j, (fraction, message) in due]
        try:
            answers = await self._client.heartbeats(items, deadline_s=self.lease_s / 3,
                                                    slots=self.slots(named=True))
        except ApiError as exc:
            if "progress" in (exc.details or {}).get("fields", ()):
                log.info("this cluster takes no progress reports: not sending them")
                self._progress_refused = True
                return
            if not self.slots_refused(exc):
                log.info("progress not sent: %s", exc)
            for job, sent in due:   # unless a newer report came meanwhile, sent again
                if job.progress is None:
                    job.progress = sent
            return
        now = time.monotonic()
        for i, (job, _) in enumerate(due):
            self._apply_heartbeat(job, answers[i] if i < len(answers) else None, now)

