"""The threads that run a worker's sync handlers.

`loop.run_in_executor` costs, per call, a `concurrent.futures.Future` (with its Condition
and Lock), the chaining of that future to an asyncio one, and a write to the loop's
self-pipe when it finishes: with no-op handlers that was a third of a Worker process's CPU.
Here a call is an asyncio future and a queue entry (`run`), or a queue entry and a
function the loop calls with the outcome (`call`: no future, no task to wake); a thread
that finishes a handler appends its outcome to a list, and wakes the loop only if the list
was empty, so one wake-up hands back every outcome that finished meanwhile.

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
        self._finished: list[tuple[Any, bool, Any]] = []   # (future or on_done, ok, value)
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

    def call(self, fn: Callable, args: tuple, on_done: Callable[[bool, Any], None]) -> None:
        """`fn(*args)` on a thread, then `on_done(True, value)` or `on_done(False, exc)` on
        the loop. Always run once taken; `fn` itself checks whether it is still wanted."""
        if self._closed:
            raise RuntimeError("the handler threads are closed")
        self._calls.put((on_done, fn, args))

    def close(self) -> None:
        """Stop the threads once their current call returns; queued calls are dropped."""
        if self._closed:
            return
        self._closed = True
        while True:     # drop what no thread took yet (no _STOP is queued before this)
            try:
                target, _, _ = self._calls.get_nowait()
            except queue.Empty:
                break
            if not callable(target):   # a `call`'s on_done is not called: nothing ran
                target.cancel()
        for _ in self._threads:
            self._calls.put((_STOP, None, ()))

    # --- the threads -------------------------------------------------------------------
    def _serve(self) -> None:
        calls = self._calls
        while True:
            target, fn, args = calls.get()
            if target is _STOP:
                return
            if not callable(target) and target.cancelled():   # a flag the loop set: dropped
                continue
            try:
                outcome = (target, True, fn(*args))
            except BaseException as exc:   # noqa: BLE001 - handed to the awaiting task
                outcome = (target, False, exc)
            self._hand_back(outcome)

    def _hand_back(self, outcome: tuple[Any, bool, Any]) -> None:
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
        for target, ok, value in finished:
            if callable(target):   # `call`: the loop's function takes it
                try:
                    target(ok, value)
                except Exception as exc:   # noqa: BLE001 - a bug; the other outcomes still go
                    self._loop.call_exception_handler(
                        {"message": "a handler outcome's callback raised", "exception": exc})
            elif target.done():    # cancelled while the handler ran: its outcome is dropped
                continue
            elif ok:
                target.set_result(value)
            else:
                target.set_exception(value)
