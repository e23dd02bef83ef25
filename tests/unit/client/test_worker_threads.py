"""The Worker's handler threads (client/_threads.py), its answer codec (client/_codec.py) and
its tasks' cancel events (client/_jobs.py)."""
from __future__ import annotations

import asyncio
import threading

import pytest

from tsched.client import _codec
from tsched.client._threads import HandlerThreads

WAIT_S = 10.0


async def test_outcomes_come_back_to_their_futures_values_and_exceptions():
    pool = HandlerThreads(3, asyncio.get_running_loop())
    try:
        def work(i: int) -> int:
            if i % 5 == 0:
                raise ValueError(f"bad {i}")
            return i * i

        futures = [pool.run(work, i) for i in range(200)]
        got = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), WAIT_S)
    finally:
        pool.close()
    for i, value in enumerate(got):
        if i % 5 == 0:
            assert isinstance(value, ValueError) and str(value) == f"bad {i}"
        else:
            assert value == i * i


async def test_a_call_hands_its_outcome_to_its_function_on_the_loop():
    loop = asyncio.get_running_loop()
    pool = HandlerThreads(3, loop)
    got: dict[int, tuple[bool, object]] = {}
    all_back = loop.create_future()

    def work(i: int) -> int:
        if i % 7 == 0:
            raise KeyError(i)
        return -i

    def on_done(i: int, ok: bool, value: object) -> None:
        assert threading.current_thread() is threading.main_thread()   # the loop's thread
        got[i] = (ok, value)
        if len(got) == 100:
            all_back.set_result(None)

    try:
        for i in range(100):
            pool.call(work, (i,), lambda ok, value, i=i: on_done(i, ok, value))
        await asyncio.wait_for(all_back, WAIT_S)
    finally:
        pool.close()
    for i, (ok, value) in got.items():
        if i % 7 == 0:
            assert not ok and isinstance(value, KeyError)
        else:
            assert ok and value == -i


async def test_handlers_run_on_named_threads_at_most_count_at_once():
    pool = HandlerThreads(2, asyncio.get_running_loop(), name_prefix="h")
    running, most, lock = 0, 0, threading.Lock()

    def work() -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        with lock:
            running -= 1
        return threading.current_thread().name

    try:
        names = await asyncio.wait_for(asyncio.gather(*(pool.run(work) for _ in range(50))),
                                       WAIT_S)
    finally:
        pool.close()
    assert most <= 2
    assert set(names) <= {"h_0", "h_1"}


async def test_a_call_cancelled_before_a_thread_takes_it_is_not_run():
    pool = HandlerThreads(1, asyncio.get_running_loop())
    release, ran = threading.Event(), []
    try:
        blocker = pool.run(release.wait, WAIT_S)      # holds the only thread
        queued = pool.run(ran.append, "queued")
        queued.cancel()
        after = pool.run(ran.append, "after")
        release.set()
        assert await asyncio.wait_for(blocker, WAIT_S) is True
        await asyncio.wait_for(after, WAIT_S)
    finally:
        pool.close()
    assert ran == ["after"]


async def test_close_lets_the_running_call_finish_and_drops_the_queued_ones():
    """Queued `run`s are cancelled; queued `call`s are dropped without their on_done."""
    pool = HandlerThreads(1, asyncio.get_running_loop())
    started, release, ran = threading.Event(), threading.Event(), []

    def first() -> str:
        started.set()
        release.wait(WAIT_S)
        ran.append("first")
        return "first"

    running = pool.run(first)
    queued = pool.run(ran.append, "queued")
    pool.call(ran.append, ("queued call",), lambda ok, value: ran.append("its on_done"))
    assert await asyncio.get_running_loop().run_in_executor(None, started.wait, WAIT_S)
    pool.close()
    assert queued.cancelled()
    release.set()
    assert await asyncio.wait_for(running, WAIT_S) == "first"
    with pytest.raises(RuntimeError):
        pool.run(ran.append, "late")
    with pytest.raises(RuntimeError):
        pool.call(ran.append, ("late call",), lambda ok, value: None)
    for t in pool._threads:
        t.join(WAIT_S)
        assert not t.is_alive()
    assert ran == ["first"]


def test_the_codec_reads_what_the_standard_library_reads():
    assert _codec.loads(b'{"tasks": [{"task_id": "a", "n": 1}], "x": null}') == \
        {"tasks": [{"task_id": "a", "n": 1}], "x": None}
    # orjson refuses a lone surrogate; the standard library reads it, and so does the codec
    assert _codec.loads(b'"\\ud800"') == "\ud800"
    with pytest.raises(ValueError):
        _codec.loads(b"{not json")


def test_a_task_s_cancel_event_wakes_a_waiter_and_is_an_event():
    from tsched.client._jobs import CancelEvent, Job
    job = Job({"task_id": "a" * 32, "fencing_token": 3}, lease_s=30)
    cancelled = job.ctx.cancelled
    assert isinstance(cancelled, threading.Event) and isinstance(cancelled, CancelEvent)
    assert not cancelled.is_set() and cancelled.wait(0) is False
    waiting = threading.Event()

    def waiter(out: list) -> None:
        waiting.set()
        out.append(cancelled.wait(WAIT_S))

    out: list = []
    t = threading.Thread(target=waiter, args=(out,))
    t.start()
    assert waiting.wait(WAIT_S)
    job.lose()
    t.join(WAIT_S)
    assert out == [True] and cancelled.is_set()
    cancelled.clear()
    assert not cancelled.is_set()


def test_an_api_time_is_the_same_instant_as_epoch_seconds_and_as_a_datetime():
    """`epoch_s` (a Worker's run_at and lease end, cached) agrees with `parse_time`."""
    from tsched.client._jobs import epoch_s, parse_time
    for value in ("2026-12-01T15:00:00Z", "2026-12-01T16:30:00.250+01:30", 1_780_000_000.5):
        when = parse_time(value)
        assert when is not None and epoch_s(value) == when.timestamp()
    assert epoch_s(None) is None and parse_time(None) is None
    assert epoch_s("2026-12-01T15:00:00Z") - epoch_s("2026-12-01T14:59:59Z") == 1.0
