"""Waiting on the loop until the Raft thread has applied what it knows committed.

A leader tells its followers an entry is committed in the tick that committed it, and may
apply it in a later tick (apply_budget.py leaves what is past its slice for the next ticks).
A follower can then apply the entry, and answer the client that wrote it, before the
leader has applied it. A decision the leader makes on its applied state for a request
that arrived after that answer (a claim finding nothing to claim) must first wait until
the leader has applied what it knew committed: `catch_up`.

The Raft thread calls `note()` after each tick's apply; it crosses to the loop only while
someone waits for an index it has reached, so a node nobody waits on pays one comparison
per tick. Commit and applied indexes are read from the Raft object when asked, not from
the tick's sample (`View`): a follower may learn of a commit in the tick that made it.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Protocol


class RaftProgress(Protocol):
    """The Raft object's indexes (pysyncobj's `SyncObj`), read on any thread."""

    @property
    def raftCommitIndex(self) -> int: ...

    @property
    def raftLastApplied(self) -> int: ...


class AppliedIndexWatcher:
    """Futures, on one asyncio loop, resolved once the Raft log is applied up to an index."""

    WAITS_MAX = 10_000   # waits held at most; past it, timed-out ones are dropped

    def __init__(self) -> None:
        self._raft: RaftProgress | None = None
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        # The lowest index waited for (None: nobody waits). Written on the loop, read on
        # the Raft thread: a stale read costs at most one call_soon_threadsafe, or is made
        # up for by the re-check in `wait` (which runs after the write).
        self.lowest: int | None = None

    @property
    def waiting(self) -> int:
        """Waits not ended yet (metrics: `tsched_raft_apply_catch_up_waits`)."""
        return sum(1 for _, _, fut in self._heap if not fut.done())

    def bind(self, raft: RaftProgress) -> None:
        """The Raft object whose indexes count (a replica's, once started)."""
        self._raft = raft

    async def catch_up(self, timeout_s: float) -> bool:
        """Wait until every entry known committed now is applied. True if there was any to
        wait for and they were applied within `timeout_s` (the caller may look again);
        False if there was none, or the wait ran out."""
        raft = self._raft
        if raft is None:
            return False
        committed = raft.raftCommitIndex
        if raft.raftLastApplied >= committed:
            return False
        return await self.wait(committed, timeout_s)

    async def wait(self, index: int, timeout_s: float) -> bool:
        """True once the log is applied up to `index`; False after `timeout_s`."""
        if self._applied() >= index:
            return True
        self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = self._loop.create_future()
        heapq.heappush(self._heap, (index, next(self._ids), fut))
        self.lowest = self._heap[0][0]
        if self._applied() >= index:      # applied between the first check and `lowest`
            self._resolve(self._applied())
        await asyncio.wait({fut}, timeout=timeout_s)   # never cancels fut
        if fut.done():
            return True
        fut.cancel()                     # marks the heap entry dead
        if len(self._heap) > self.WAITS_MAX:
            self._heap = [e for e in self._heap if not e[2].done()]
            heapq.heapify(self._heap)
        while self._heap and self._heap[0][2].done():
            heapq.heappop(self._heap)
        self.lowest = self._heap[0][0] if self._heap else None
        return False

    def note(self) -> None:
        """The Raft thread, after a tick's apply."""
        lowest, loop = self.lowest, self._loop
        if lowest is None or loop is None:
            return
        applied = self._applied()
        if applied < lowest:
            return
        try:
            loop.call_soon_threadsafe(self._resolve, applied)
        except RuntimeError:
            pass   # the loop is closed: nobody waits any more

    def _applied(self) -> int:
        return self._raft.raftLastApplied if self._raft is not None else 0

    def _resolve(self, applied_index: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= applied_index:
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                fut.set_result(None)
        self.lowest = heap[0][0] if heap else None
