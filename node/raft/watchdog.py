"""The Raft thread's watchdog: a node whose Raft thread is broken stops instead of serving.

pysyncobj's tick thread logs an exception and tries again, forever: a node whose every tick
fails (a damaged entry, a bug) stays up, answers reads from a state that no longer moves,
and looks alive. `Watchdog` is told of each tick's outcome (`tick_ok`, `tick_failed`) and of
work that legitimately holds the thread for long (`busy`, `progress`); its own thread checks
the Raft thread's last sign of life:

- stalled longer than `stall_ready_s` (the election timeout): `reason()` says so, and
  `/readyz` turns false (the cluster may already have moved on without this node);
- `tick_failures_max` failed ticks in a row, or stalled longer than `stall_exit_s`: it logs
  why at CRITICAL and the process exits with `WATCHDOG_EXIT_CODE`.

A process that was stopped as a whole (SIGSTOP, a suspended VM) is not a stalled Raft
thread: when the watchdog's own sleep overran, it starts counting afresh.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Callable

from tsched.node.raft.options import RaftOptions

log = logging.getLogger(__name__)

WATCHDOG_EXIT_CODE = 75
CHECK_PERIOD_S = 0.25
OWN_LATENESS_S_MAX = 1.0   # the watchdog's own wake-up this late: the whole process was held
# A gap between two ticks longer than this share of the shortest election timeout is logged
# at WARNING (at most once per LATE_TICK_LOG_EVERY_S, with the longest gap since): a tick
# that late is a heartbeat that went out late, so elections may follow (as etcd's "leader
# failed to send out heartbeat on time"); the cause is CPU starvation or a pause.
LATE_TICK_SHARE = 0.5
LATE_TICK_LOG_EVERY_S = 10.0


def exit_now(reason: str, code: int = WATCHDOG_EXIT_CODE) -> None:
    log.critical("%s; stopping the node", reason)
    logging.shutdown()
    os._exit(code)


class Watchdog:
    def __init__(self, *, stall_ready_s: float, stall_exit_s: float, tick_failures_max: int,
                 on_fatal: Callable[[str], None] = exit_now,
                 clock: Callable[[], float] = time.monotonic,
                 late_tick_s: float | None = None) -> None:
        self.stall_ready_s = stall_ready_s
        self.stall_exit_s = stall_exit_s
        self.tick_failures_max = tick_failures_max
        self.late_tick_s = late_tick_s
        self.late_ticks = 0                 # ticks later than late_tick_s (all of them)
        self._late_unlogged = 0
        self._late_max_s = 0.0
        self._late_logged_at: float | None = None
        self._ticked = False
        self._on_fatal = on_fatal
        self._clock = clock
        self._last_alive = clock()
        self._failures = 0
        self._busy: str | None = None
        self._fatal: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def for_options(cls, o: RaftOptions) -> Watchdog:
        """A replica's watchdog: not ready after an election timeout without progress, and
        the bounds of `RaftOptions.watchdog_*`."""
        return cls(stall_ready_s=o.raft_max_timeout_s, stall_exit_s=o.watchdog_stall_exit_s,
                   tick_failures_max=o.watchdog_tick_failures_max,
                   late_tick_s=LATE_TICK_SHARE * o.raft_min_timeout_s)

    # --- told by the Raft thread -----------------------------------------------------------

    def tick_ok(self) -> None:
        now = self._clock()
        late_tick_s = self.late_tick_s
        if late_tick_s is not None and self._busy is None and self._ticked:
            self._note_gap(now, now - self._last_alive, late_tick_s)
        self._ticked = True     # the first gap is start-up (opening the log), not lateness
        self._last_alive = now
        self._failures = 0

    def _note_gap(self, now: float, gap_s: float, late_tick_s: float) -> None:
        if gap_s <= late_tick_s:
            return
        self.late_ticks += 1
        self._late_unlogged += 1
        self._late_max_s = max(self._late_max_s, gap_s)
        if self._late_logged_at is not None and now - self._late_logged_at < LATE_TICK_LOG_EVERY_S:
            return
        log.warning("raft: %d tick(s) late, the longest %.2f s between ticks (heartbeats are "
                    "due every few tens of ms; elections start after %.2f s): the process "
                    "is starved of CPU or was paused", self._late_unlogged, self._late_max_s,
                    late_tick_s / LATE_TICK_SHARE)
        self._late_logged_at, self._late_unlogged, self._late_max_s = now, 0, 0.0

    def progress(self) -> None:
        """Work done inside a long tick (a batch applied): the thread is not stuck."""
        self._last_alive = self._clock()

    def tick_failed(self, exc: BaseException) -> None:
        self._failures += 1
        if self._failures >= self.tick_failures_max:
            self.fatal(f"the Raft thread failed {self._failures} ticks in a row, the last "
                       f"with {exc!r}")

    @contextlib.contextmanager
    def busy(self, what: str) -> Iterator[None]:
        """Known long work on the Raft thread (restoring a snapshot): not a stall."""
        self._busy = what
        try:
            yield
        finally:
            self._busy = None
            self._last_alive = self._clock()

    # --- read by the API and by its own thread ---------------------------------------------

    def reason(self) -> str | None:
        """Why this node must not serve, or None."""
        if self._fatal is not None:
            return self._fatal
        if self._busy is not None:
            return None
        stalled = self._clock() - self._last_alive
        if stalled > self.stall_ready_s:
            return f"the Raft thread has shown no progress for {stalled:.1f} s"
        return None

    def mark_fatal(self, reason: str) -> None:
        """/readyz is false from here on (the caller stops the process)."""
        self._fatal = reason

    def fatal(self, reason: str) -> None:
        self.mark_fatal(reason)
        self._on_fatal(reason)

    def check(self) -> None:
        if self._busy is not None or self._fatal is not None:
            return
        stalled = self._clock() - self._last_alive
        if stalled > self.stall_exit_s:
            self.fatal(f"the Raft thread has shown no progress for {stalled:.1f} s "
                       f"(limit {self.stall_exit_s:.1f} s)")

    def start(self) -> None:
        self._last_alive = self._clock()
        self._thread = threading.Thread(target=self._run, name="raft-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * CHECK_PERIOD_S)

    def _run(self) -> None:
        while True:
            before = self._clock()
            if self._stop.wait(CHECK_PERIOD_S):
                return
            if self._clock() - before > CHECK_PERIOD_S + OWN_LATENESS_S_MAX:
                self._last_alive = self._clock()   # the whole process was held: not a stall
                continue
            self.check()
