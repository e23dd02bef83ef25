"""How the Raft thread sleeps: until its next timer (`TimedPoller`), woken at once by a
proposal (`Waker`)."""
from __future__ import annotations

import contextlib
import os
from typing import Callable, Protocol

from pysyncobj.monotonic import monotonic as monotonicTime
from pysyncobj.poller import POLL_EVENT_TYPE, Poller

from tsched.node.raft.options import RaftOptions
from tsched.node.raft.syncobj_adapter import (
    LEADER, election_deadline_s, next_append_entries_at_s, raft_state)


class Ticking(Protocol):
    """The SyncObj whose poller `TimedPoller` replaces (`RaftObject`)."""

    _poller: Poller
    cut: bool      # the last tick cut its apply slice short (apply_budget.py)


class Waker:
    """Wakes the Raft thread from its poll when a proposal is queued (pysyncobj only does
    so with batching off), saving up to autoTickPeriod per proposal."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self.closed = False

    def subscribe(self, poller: Poller) -> None:
        poller.subscribe(self._r, self._drain, POLL_EVENT_TYPE.READ)

    def _drain(self, _descr: int, _event: int) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._r, 4096):
                pass

    def wake(self) -> None:
        if not self.closed:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._w, b"w")

    def close(self, poller: Poller) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            poller.unsubscribe(self._r)
        os.close(self._r)
        os.close(self._w)



class TimedPoller:
    """pysyncobj's poller, polled until the Raft thread's next timer rather than for a
    fixed `autoTickPeriod`: a leader's next heartbeat, a follower's or candidate's
    election deadline, bounded by [auto_tick_period_s, idle_tick_max_s] (the lower bound
    keeps a node that cannot campaign yet, its deadline passed, from spinning; the upper
    one keeps the per-tick checks (connection retries, the snapshot child, the watchdog's
    sign of life) going). Everything else that needs the thread is an event that ends the
    poll: a message, a writable socket, a proposal or task through `Waker`."""

    def __init__(self, inner: Poller, obj: Ticking, options: RaftOptions) -> None:
        self._inner, self._obj = inner, obj
        self._min_s, self._max_s = options.auto_tick_period_s, options.idle_tick_max_s

    @classmethod
    def install(cls, obj: Ticking | None, options: RaftOptions) -> None:
        if obj is not None and not isinstance(obj._poller, cls):
            obj._poller = cls(obj._poller, obj, options)

    def wait_s(self) -> float:
        obj = self._obj
        if obj.cut:
            return 0.0     # committed entries left over from a cut apply slice
        if raft_state(obj) == LEADER:
            due = next_append_entries_at_s(obj)
        else:
            due = election_deadline_s(obj)
        return min(self._max_s, max(self._min_s, due - monotonicTime()))

    def poll(self, _timeout: float) -> None:
        self._inner.poll(self.wait_s())

    def subscribe(self, descr: int, callback: Callable[[int, int], None],
                  event_mask: int) -> None:
        self._inner.subscribe(descr, callback, event_mask)

    def unsubscribe(self, descr: int) -> None:
        self._inner.unsubscribe(descr)

