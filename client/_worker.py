"""The Worker: its life (run, stop, signals), running each claimed task's handler,
heartbeats and reports; claiming is _claiming.py. The theory of operation is worker.py's.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import socket
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Mapping

from . import otel
from ._claiming import CLAIM_WAIT_S_MAX, UNSERVABLE_CODES, Claiming, check_priorities
from ._jobs import (LEASE_LOST_CODES, RETRY_ALL, Job, RetryRule, error_code_of,
                    outcome_of, parse_time)
from ._outbox import Outbox
from ._progress import Progressing
from ._reserve import check_reserve, lane_workers, run_lanes, split_slots
from ._session import SESSION_TIMEOUT_S, Session
from ._threads import HandlerThreads
from ._window import HELD_MAX_DEFAULT, Window
from .client import AsyncClient, Client
from .errors import ApiError

log = logging.getLogger("tsched.worker")

THREAD_WAKE_EARLY_S = 0.005  # sync handlers sleep the last few ms before run_at in the thread
CLAIM_AHEAD_FACTOR = 3       # default claim_ahead per thread of concurrency
HEARTBEAT_S_MAX = 20.0       # heartbeats at a third of the lease, at least this often


def _in_thread(handler: Callable, payload: Any, job: Job) -> Any:
    """Runs on a pool thread: a task given back while it queued is not started. The loop
    hands the task over up to THREAD_WAKE_EARLY_S before run_at; a thread's sleep is finer
    than the event loop's timer (which wakes up to a millisecond or more late)."""
    job.started = True
    if job.lost:
        raise RuntimeError("given back before it started")
    left_s = job.delay_s()
    if left_s > 0:
        time.sleep(left_s)
    return handler(payload, job.ctx)


def retry_rules(handlers: dict, retry_on: dict, no_retry_on: dict) -> dict[str, RetryRule]:
    """The RetryRule of each task type named in `retry_on` / `no_retry_on` (lists of
    exception class names); naming a task type without a handler is a mistake."""
    unknown = sorted((set(retry_on) | set(no_retry_on)) - set(handlers))
    if unknown:
        raise ValueError(f"retry_on/no_retry_on name task types without a handler: {unknown}")
    for lists in (retry_on, no_retry_on):
        for names in lists.values():
            if isinstance(names, str):
                raise ValueError("retry_on/no_retry_on values are lists of class names")
    return {t: RetryRule(tuple(retry_on.get(t, ())), tuple(no_retry_on.get(t, ())))
            for t in sorted(set(retry_on) | set(no_retry_on))}


def _attempt_of(job: Job) -> str:
    """`attempt 2 of 4` (runs at most max_retries + 1), or `attempt 2` when not known."""
    most = job.task.get("max_retries")
    runs = f" of {most + 1}" if isinstance(most, int) else ""
    return f"attempt {job.ctx.attempt}{runs}"


def _retry_in(outcome: dict, task: dict) -> str:
    """When a retry runs: `in N s` until the answer's `next_retry_at` (the end of the
    backoff, or of the handler's RetryLater) by the local clock, as the worker starts a
    task at its run_at; a node that does not say it leaves the handler's own delay."""
    try:
        when = parse_time(task.get("next_retry_at"))
    except (TypeError, ValueError):   # a log line must never stop the report's callback
        when = None
    after = outcome.get("retry_after_s") if when is None else \
        round(max(0.0, when.timestamp() - time.time()), 1)
    return f"in {after:g} s" if isinstance(after, (int, float)) else "after its backoff"


def _log_next_step(job: Job, outcome: dict, task: dict | None) -> None:
    """What the cluster does after a failure it accepted, as its answer (the task's state)
    says: a retry (when), the dead-letter queue, or a cancel."""
    task_id = job.ctx.task_id
    state = task.get("state") if task else None
    if task and state == "pending":
        when = _retry_in(outcome, task)
        most = job.task.get("max_retries")
        of = f" of {most}" if isinstance(most, int) else ""
        log.info("task %s: retry %d%s %s", task_id, job.ctx.attempt, of, when)
    elif state == "dead_letter":
        why = "no retries left" if outcome.get("retryable") else \
            "not retryable (NonRetryable, or outside retry_on)"
        log.warning("task %s: dead-lettered after %s: %s (tsctl dlq replay %s runs it again)",
                    task_id, _attempt_of(job), why, task_id)
    elif state == "cancelled":
        log.info("task %s: cancelled (a cancel was requested while it ran)", task_id)


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"

class Worker(Claiming, Progressing):
    def __init__(self, urls: Any, handlers: dict[str, Callable], concurrency: int = 4,
                 lease_s: float = 30, prefetch_ms: int = 250, token: str | None = None,
                 worker_id: str | None = None, grace_s: float = 30.0,
                 wait_s: float = CLAIM_WAIT_S_MAX, timeout_s: float = 30.0,
                 claim_ahead: int | None = None, ca_file: str | None = None,
                 held_max: int | None = None, carry_completions: bool = True,
                 retry_on: dict[str, Iterable[str]] | None = None,
                 no_retry_on: dict[str, Iterable[str]] | None = None,
                 priorities: tuple[int, int] | str | None = None,
                 reserve: Mapping[str, float | str] | str | Iterable[str] | None = None,
                 session_timeout_s: float | None = SESSION_TIMEOUT_S
                 ) -> None:
        if not handlers:
            raise ValueError("handlers: at least one task type is needed")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if lease_s <= 0 or not 0 <= prefetch_ms <= 1000 or grace_s < 0 or wait_s < 0:
            raise ValueError("lease_s > 0, prefetch_ms in 0..1000, grace_s >= 0, wait_s >= 0")
        if session_timeout_s is not None and not 1 <= session_timeout_s <= 60:
            raise ValueError("session_timeout_s must be in 1..60 seconds, or None (no session)")
        # The worker's session (_session.py): its tasks go back this long after it dies.
        self.session_timeout_s = session_timeout_s
        self.urls, self.token, self.timeout_s = urls, token, timeout_s
        self.ca_file = ca_file     # CA bundle for https:// nodes
        self.handlers = dict(handlers)
        self._is_async = {t: inspect.iscoroutinefunction(h) for t, h in self.handlers.items()}
        self._traced = otel.available()   # the `otel` extra: each handler in a span (otel.py)
        # Per task type: which exception class names are retried (DESIGN 14.1).
        self.retry_rules = retry_rules(self.handlers, retry_on or {}, no_retry_on or {})
        self.concurrency, self.lease_s, self.prefetch_ms = concurrency, lease_s, prefetch_ms
        self.priorities = check_priorities(priorities)   # claims take only this range
        # Reserved capacity (_reserve.py): lanes of slots, each a Worker of its own.
        self.reserve = check_reserve(reserve)
        self._lanes = split_slots(concurrency, self.reserve, self.priorities) \
            if self.reserve else []
        self._subs: list[Worker] = []
        self.handles_signals = True     # False for a lane: its worker's handlers stop it
        self.grace_s, self.wait_s = grace_s, min(wait_s, CLAIM_WAIT_S_MAX)
        # Tasks held beyond those running, so a claim round trip never leaves a thread idle
        # (like Celery's prefetch multiplier of 4: at most 4 x concurrency held in all).
        self.claim_ahead = CLAIM_AHEAD_FACTOR * concurrency if claim_ahead is None \
            else claim_ahead
        if self.claim_ahead < 0:
            raise ValueError("claim_ahead must be >= 0")
        if held_max is not None and held_max < 1:
            raise ValueError("held_max must be >= 1")
        # Fast handlers widen the window up to held_max; slow ones keep concurrency + claim_ahead.
        self.held_max = HELD_MAX_DEFAULT if held_max is None else held_max
        self._window = Window(concurrency, self.claim_ahead, self.held_max)
        self.carry_completions = carry_completions
        self._carry = carry_completions   # off against a node that predates it
        self._report_slots = True         # likewise: slot reports on claims and heartbeats
        self._held = 0   # claimed tasks whose handler has not returned yet
        self.worker_id = worker_id or default_worker_id()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = threading.Event()
        self._jobs: dict[str, tuple[Job, asyncio.Future]] = {}   # a Task or a plain future
        self._side_reports: set[asyncio.Task] = set()   # RateLimited reports in flight

    # --- public ----------------------------------------------------------------------
    def run(self) -> None:
        """Block until stopped (stop(), SIGTERM, SIGINT)."""
        asyncio.run(self.run_async())

    def stop(self) -> None:
        """Ask the worker to stop; safe from any thread or a signal handler. A second call
        (a second Ctrl-C) cuts the grace period short."""
        hurry = self._stop_requested.is_set()
        self._stop_requested.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe((self._hurry if hurry else self._stopping).set)
            except RuntimeError:
                pass   # the loop closed in between: nothing left to stop

    async def run_async(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()
        self._install_signals()
        if self._stop_requested.is_set():
            self._stopping.set()
        try:
            if self._lanes:
                self._subs = lane_workers(self, self._lanes)
                await run_lanes(self, self._subs)
            else:
                await self._serve()
        finally:
            self._remove_signals()

    async def _serve(self) -> None:
        assert self._loop is not None, "run_async sets the loop"
        self._slot_free = asyncio.Event()
        self._async_slots = asyncio.Semaphore(self.concurrency)
        self._pool = HandlerThreads(self.concurrency, self._loop)
        self._client = AsyncClient(self.urls, token=self.token, timeout_s=self.timeout_s,
                                   ca_file=self.ca_file)
        self._outbox = Outbox(self._client, give_up_s=self.lease_s)
        self._keepalive = Session(self._client, self.worker_id, self.session_timeout_s,
                                self._heartbeat_once)
        self._progress_due = asyncio.Event()
        helpers = [asyncio.create_task(self._heartbeat_loop()),
                   asyncio.create_task(self._progress_loop()),
                   asyncio.create_task(self._outbox.run()),
                   asyncio.create_task(self._keepalive.run())]
        claimer = asyncio.create_task(self._claim_loop())
        try:
            await self._stopping.wait()
        finally:
            claimer.cancel()
            await asyncio.gather(claimer, return_exceptions=True)
            await self._drain()
            for h in helpers:
                h.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            await self._keepalive.end()   # after the drain: its tasks are given back already
            self._pool.close()
            await self._client.aclose()

    @property
    def running(self) -> int:
        """Tasks held right now (claimed, running or being reported)."""
        return len(self._jobs) + sum(sub.running for sub in self._subs)

    # --- signals ---------------------------------------------------------------------
    def _install_signals(self) -> None:
        self._signals: list[int] = []
        if not self.handles_signals or threading.current_thread() is not threading.main_thread():
            return
        assert self._loop is not None, "run_async sets the loop before installing signals"
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._loop.add_signal_handler(sig, self.stop)
                self._signals.append(sig)
            except (NotImplementedError, RuntimeError):
                pass

    def _remove_signals(self) -> None:
        assert self._loop is not None, "run_async set the loop, and never unsets it"
        for sig in self._signals:
            self._loop.remove_signal_handler(sig)

    # --- starting a claimed task ----------------------------------------------------
    def _start(self, task: dict) -> None:
        job = Job(task, self.lease_s, self._parents_of, self._progressed)
        self._held += 1
        self._window.handler_started()
        task_type = job.ctx.task_type
        if (task_type in self.handlers and not self._is_async[task_type]
                and job.delay_s() <= THREAD_WAKE_EARLY_S):
            runner = self._run_on_thread(job)
        else:
            runner = asyncio.create_task(self._run_job(job))
        self._jobs[job.ctx.task_id] = (job, runner)

    def _parents_of(self, task_id: str) -> Any:
        """A step's parents (`ctx.parents`), asked from a handler's thread through the
        worker's client on its loop; from the loop itself (an async handler) through a
        short-lived sync client, which blocks the loop for that one request."""
        loop = self._loop
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if loop is not None and not on_loop:
            return asyncio.run_coroutine_threadsafe(self._client.parents(task_id),
                                                    loop).result(self.timeout_s + 5)
        with Client(self.urls, token=self.token, timeout_s=self.timeout_s,
                    ca_file=self.ca_file) as client:
            return client.parents(task_id)

    # --- running ---------------------------------------------------------------------
    # A due task of a sync handler (what a backlog is made of) takes the short way: no
    # coroutine of its own, its thread's outcome comes back to `_on_thread_done` and its
    # report's answer to `_on_reported`; its runner is a plain future, done once reported.
    # Per task that saves an asyncio task and the two futures it awaited (bench/notes/
    # 2026-12-03-leaner-worker.md). The rest (async handlers, run_at ahead): `_run_job`.
    def _run_on_thread(self, job: Job) -> asyncio.Future:
        assert self._loop is not None, "tasks are claimed only inside run_async"
        runner = self._loop.create_future()
        self._pool.call(_in_thread, (self._handler_of(job, False), job.task.get("payload"),
                                     job), lambda ok, value: self._on_thread_done(
                                         job, runner, ok, value))
        return runner

    def _handler_of(self, job: Job, is_async: bool) -> Callable:
        """The task type's handler; with the `otel` extra, run in its task's span."""
        handler = self.handlers[job.ctx.task_type]
        return otel.traced(handler, job.task, is_async, self._recording) if self._traced else handler

    def _on_thread_done(self, job: Job, runner: asyncio.Future, ok: bool, value: Any) -> None:
        self._handler_returned(job)
        if job.lost or runner.done():   # given back or cancelled meanwhile: dropped
            self._finished(job, runner)
            return
        outcome = outcome_of(value) if ok else self._failed(job, value)
        self._post_report(job, outcome, runner)

    async def _run_job(self, job: Job) -> None:
        try:
            try:
                await self._until_run_at(job)
                outcome = await self._call_handler(job)
            finally:
                self._handler_returned(job)
            if not job.lost:
                assert self._loop is not None, "tasks run only inside run_async"
                reported = self._loop.create_future()
                self._post_report(job, outcome, reported)
                await reported
        finally:
            self._forget(job)

    def _handler_returned(self, job: Job) -> None:
        job.returned = True
        self._held -= 1   # the slot frees as the handler returns, before the report
        self._window.handler_done()
        self._slot_free.set()

    def _finished(self, job: Job, runner: asyncio.Future) -> None:
        self._forget(job)
        if not runner.done():
            runner.set_result(None)

    def _forget(self, job: Job) -> None:
        """No longer held (`running`); a later claim of the same task is another Job."""
        if self._jobs.get(job.ctx.task_id, (None,))[0] is job:
            del self._jobs[job.ctx.task_id]

    async def _until_run_at(self, job: Job) -> None:
        """Early dispatch: the handler starts at run_at by the local clock. Sync handlers
        are handed to their thread a little early and sleep the rest there."""
        early_s = 0.0 if self._is_async.get(job.ctx.task_type) else THREAD_WAKE_EARLY_S
        delay_s = job.delay_s() - early_s
        if delay_s > 0:
            await asyncio.sleep(delay_s)

    async def _call_handler(self, job: Job) -> dict:
        if job.ctx.task_type not in self.handlers:
            return {"error": f"no handler for task type {job.ctx.task_type!r}", "retryable": False}
        is_async = self._is_async[job.ctx.task_type]
        handler = self._handler_of(job, is_async)
        payload = job.task.get("payload")
        try:
            if is_async:
                async with self._async_slots:
                    job.started = True
                    result = await handler(payload, job.ctx)
            else:
                result = await self._pool.run(_in_thread, handler, payload, job)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:   # noqa: BLE001 - every handler failure is reported
            return self._failed(job, exc)
        return outcome_of(result)

    def _failed(self, job: Job, exc: BaseException) -> dict:
        log.info("task %s %s failed: %r", job.ctx.task_id, _attempt_of(job), exc)
        return outcome_of(exc=exc, rule=self.retry_rules.get(job.ctx.task_type, RETRY_ALL))

    # --- heartbeats ------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        # Heartbeats also report the worker's slots: often enough that a busy worker's
        # report never ages out at the leader (node/scheduling/worker_slots.py, 60 s).
        interval_s = min(self.lease_s / 3, HEARTBEAT_S_MAX)
        while True:
            await asyncio.sleep(interval_s)   # the heartbeat period itself
            await self._heartbeat_once(interval_s)

    async def _heartbeat_once(self, budget_s: float) -> None:
        jobs = [job for job, _ in self._jobs.values() if not job.lost and not job.reported]
        if not jobs:
            return
        items = [{"task_id": j.ctx.task_id, "fencing_token": j.ctx.fencing_token,
                  "lease_s": self.lease_s} for j in jobs]
        answers = None
        for _ in range(2):   # again without the slot report, if a node refuses it
            try:
                answers = await self._client.heartbeats(items, deadline_s=budget_s,
                                                        slots=self.slots(named=True))
                break
            except ApiError as exc:
                if not self.slots_refused(exc):
                    log.warning("heartbeat: %s", exc)
                    break
        now = time.monotonic()
        for i, job in enumerate(jobs):
            answer = answers[i] if answers and i < len(answers) else None
            self._apply_heartbeat(job, answer, now)

    def _apply_heartbeat(self, job: Job, answer: Any, now: float) -> None:
        code = error_code_of(answer) if answer is not None else "no_answer"
        if code is None:
            job.extend(answer.get("lease_expires_at"), self.lease_s)
            if answer.get("cancel_requested"):
                job.ctx.cancelled.set()
        elif code in LEASE_LOST_CODES or now > job.lease_deadline:
            log.info("task %s: lease lost (%s)", job.ctx.task_id, code)
            job.lose()

    # --- reporting -------------------------------------------------------------------
    def _post_report(self, job: Job, outcome: dict, done: asyncio.Future) -> None:
        """Queue the outcome; `done` gets its result once the cluster has answered it."""
        if "rate_limited" in outcome:
            assert self._loop is not None, "tasks run only inside run_async"
            report = self._loop.create_task(self._report_rate_limited(job, outcome, done))
            self._side_reports.add(report)   # the loop keeps tasks weakly only
            report.add_done_callback(self._side_reports.discard)
            return
        item = {"task_id": job.ctx.task_id, "fencing_token": job.ctx.fencing_token, **outcome}
        self._outbox.post(item, lambda code, task: self._on_reported(job, outcome, done,
                                                                     code, task))

    def _on_reported(self, job: Job, outcome: dict, done: asyncio.Future,
                     code: str | None, task: dict | None = None) -> None:
        job.reported = True
        if code is None and "error" in outcome:
            _log_next_step(job, outcome, task)
        if code in UNSERVABLE_CODES and "result" in outcome:
            self._post_report(job, {"error": f"result refused by the cluster: {code}",
                                    "retryable": False}, done)
            return
        if code is not None and code not in LEASE_LOST_CODES:
            log.warning("task %s: report refused: %s", job.ctx.task_id, code)
        self._finished(job, done)

    async def _report_rate_limited(self, job: Job, outcome: dict, done: asyncio.Future) -> None:
        """A handler's RateLimited: pause the limit for every worker, the task back to
        pending without its attempt counted. Refused (the task names no such limit), it is
        reported as a failure instead, so the task is not left running to its lease's end."""
        limit, after_s = outcome["rate_limited"]
        try:
            await self._client.rate_limited(job.ctx.task_id, job.ctx.fencing_token, limit,
                                            after_s)
        except ApiError as exc:
            if exc.code not in LEASE_LOST_CODES:
                log.warning("task %s: RateLimited(%r) refused: %s", job.ctx.task_id, limit, exc)
                self._post_report(job, {"error": outcome["error"], "retryable": True}, done)
                return
            self._on_reported(job, {}, done, exc.code)
            return
        log.info("task %s: limit %s paused %g s; the task waits for it", job.ctx.task_id,
                 limit, after_s)
        self._on_reported(job, {}, done, None)

    # --- stopping --------------------------------------------------------------------
    async def _drain(self) -> None:
        """Give back unstarted tasks, let running ones finish within grace, release the rest."""
        unstarted = [(job, runner) for job, runner in self._jobs.values() if not job.started]
        for job, runner in unstarted:
            self._abandon(job, runner)
        await asyncio.gather(*(self._give_back(job) for job, _ in unstarted))
        await self._grace([runner for _, runner in self._jobs.values()])
        overdue = [(job, runner) for job, runner in self._jobs.values() if not job.reported]
        for job, runner in overdue:
            self._abandon(job, runner)
        await asyncio.gather(*(self._give_back(job) for job, _ in overdue))
        leftovers = [runner for _, runner in self._jobs.values()]
        if leftovers:
            await asyncio.wait(leftovers, timeout=1.0)

    def _abandon(self, job: Job, runner: asyncio.Future) -> None:
        """Its result, if any comes, is dropped (the task is given back)."""
        job.lose()
        runner.cancel()
        if not isinstance(runner, asyncio.Task):   # no coroutine left to forget it
            self._forget(job)

    async def _grace(self, runners: list[asyncio.Future]) -> None:
        """Until the runners are done, grace_s has passed, or stop() is called again."""
        if not runners:
            return
        hurry = asyncio.create_task(self._hurry.wait())
        try:
            waits: list[asyncio.Future[Any]] = [
                asyncio.gather(*runners, return_exceptions=True), hurry]
            await asyncio.wait(waits, timeout=self.grace_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hurry.cancel()

    async def _give_back(self, job: Job) -> None:
        token = job.ctx.fencing_token
        try:
            await self._client.release(job.ctx.task_id, token)
        except ApiError as exc:
            if exc.code in ("http_404", "http_405", "not_found"):
                await self._fail_stopped(job)
            elif exc.code not in LEASE_LOST_CODES:
                log.warning("task %s: release failed: %s", job.ctx.task_id, exc)

    async def _fail_stopped(self, job: Job) -> None:
        try:
            await self._client.fail(job.ctx.task_id, job.ctx.fencing_token,
                                    "worker stopped before the task finished", retryable=True)
        except ApiError as exc:
            if exc.code not in LEASE_LOST_CODES:   # already someone else's: nothing to give
                log.warning("task %s: could not give back: %s", job.ctx.task_id, exc)
