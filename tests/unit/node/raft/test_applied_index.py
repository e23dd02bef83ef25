"""AppliedIndexWatcher: a wait on the loop ends once the Raft thread notes that it has
applied up to it, from the Raft thread's side of the fence; `catch_up` waits only when
the replica knows of committed entries it has not applied; a wait that times out leaves
nothing behind."""
from __future__ import annotations

import asyncio
import threading

from tsched.node.raft.applied_index import AppliedIndexWatcher


class Progress:
    """A Raft object's two indexes, as pysyncobj's SyncObj shows them."""

    def __init__(self, committed: int, applied: int) -> None:
        self.raftCommitIndex, self.raftLastApplied = committed, applied


def watcher_of(progress: Progress) -> AppliedIndexWatcher:
    watcher = AppliedIndexWatcher()
    watcher.bind(progress)
    return watcher


def test_nothing_to_catch_up_returns_at_once_and_says_so() -> None:
    watcher = watcher_of(Progress(committed=5, applied=5))
    assert asyncio.run(watcher.catch_up(timeout_s=0)) is False
    assert watcher.lowest is None


def test_catch_up_ends_when_the_raft_thread_has_applied_what_was_committed() -> None:
    progress = Progress(committed=6, applied=3)
    watcher = watcher_of(progress)

    async def scenario() -> tuple[bool, list[int | None]]:
        armed: list[int | None] = []

        def raft_thread() -> None:
            for index in (4, 5, 6):      # one tick each; more commits meanwhile
                progress.raftLastApplied = index
                progress.raftCommitIndex = index + 2
                watcher.note()

        async def start_raft_thread_once_armed() -> None:
            while watcher.lowest is None:
                await asyncio.sleep(0)   # let the waiting coroutine run until it has armed
            armed.append(watcher.lowest)
            threading.Thread(target=raft_thread).start()

        helper = asyncio.ensure_future(start_raft_thread_once_armed())
        caught_up = await watcher.catch_up(timeout_s=30)
        await helper
        return caught_up, armed

    caught_up, armed = asyncio.run(scenario())
    assert caught_up is True and armed == [6]   # what was committed when asked, not later
    assert watcher.lowest is None


def test_a_note_below_the_lowest_wait_resolves_nothing() -> None:
    progress = Progress(committed=10, applied=1)
    watcher = watcher_of(progress)

    async def scenario() -> tuple[bool, int | None]:
        waiting = asyncio.ensure_future(watcher.catch_up(timeout_s=0.05))
        await asyncio.sleep(0)
        progress.raftLastApplied = 9
        watcher.note()
        lowest = watcher.lowest
        return await waiting, lowest

    caught_up, lowest = asyncio.run(scenario())
    assert caught_up is False and lowest == 10
    assert watcher.lowest is None        # the timed-out wait left nothing behind


def test_waits_resolve_in_index_order() -> None:
    progress = Progress(committed=0, applied=0)
    watcher = watcher_of(progress)

    async def scenario() -> list[int]:
        order: list[int] = []

        async def wait_for(index: int) -> None:
            assert await watcher.wait(index, timeout_s=30)
            order.append(index)

        waits = [asyncio.ensure_future(wait_for(i)) for i in (7, 3, 5)]
        await asyncio.sleep(0)
        assert watcher.lowest == 3
        progress.raftLastApplied = 5
        watcher.note()
        await asyncio.gather(waits[1], waits[2])     # 3 and 5
        assert watcher.lowest == 7 and not waits[0].done()
        progress.raftLastApplied = 7
        watcher.note()
        await asyncio.gather(*waits)
        return order

    assert asyncio.run(scenario()) == [3, 5, 7]
