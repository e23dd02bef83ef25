"""The threads that run a worker's sync handlers.

`loop.run_in_executor` costs, per call, a `concurrent.futures.Future` (with its Condition
and Lock), the chaining of that future to an asyncio one, and a write to the loop's
self-pipe when it finishes: with no-op handlers that was a third of a Worker process's CPU.
Here a call is an asyncio future and a queue entry; a thread that finishes a handler
appends its outcome to a list, and wakes the loop only if the list was empty, so one
wake-up hands back every outcome that finished meanwhile.

A call whose future was cancelled before a thread took it is not run. `close()` lets each
thread finish the handler it runs and stops it; what is still queued is not run.
"""
from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Callable

_STOP = object()


class HandlerThreads:
    def __init__(self, count: int, loop: asyncio.AbstractEventLoop,
                 name_prefix: str = "tsched-handler") -> None:
        assert count >= 1
        self._loop = loop
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._finished: list[tuple[asyncio.Future, bool, Any]] = []
        self._closed = False
        self._threads = [threading.Thread(target=self._serve, name=f"{name_prefix}_{i}")
                         for i in range(count)]
        for t in self._threads:
            t.start()

    def run(self, fn: Callable, *args: Any) -> asyncio.Future:
        """`fn(*args)` on a thread; the future has its value or exception (loop only)."""
        if self._closed:
            raise RuntimeError("the handler threads are closed")
        future = self._loop.create_future()
        self._calls.put((future, fn, args))
        return future

    def close(self) -> None:
        """Stop the threads once their current call returns; queued calls are dropped."""
        if self._closed:
            return
        self._closed = True
        while True:     # drop what no thread took yet (no _STOP is queued before this)
            try:
                future, _, _ = self._calls.get_nowait()
            except queue.Empty:
                break
            future.cancel()
        for _ in self._threads:
            self._calls.put((_STOP, None, ()))

    # --- the threads -------------------------------------------------------------------
    def _serve(self) -> None:
        calls = self._calls
        while True:
            future, fn, args = calls.get()
            if future is _STOP:
                return
            if future.cancelled():   # a read of a flag the loop set: the call is dropped
                continue
            try:
                outcome = (future, True, fn(*args))
            except BaseException as exc:   # noqa: BLE001 - handed to the awaiting task
                outcome = (future, False, exc)
            self._hand_back(outcome)

    def _hand_back(self, outcome: tuple[asyncio.Future, bool, Any]) -> None:
        with self._lock:
            first = not self._finished
            self._finished.append(outcome)
        if first:
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:
                pass    # the loop is closed: nobody waits for the outcome any more

    # --- the loop ----------------------------------------------------------------------
    def _deliver(self) -> None:
        with self._lock:
            finished, self._finished = self._finished, []
        for future, ok, value in finished:
            if future.done():      # cancelled while the handler ran: its outcome is dropped
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
