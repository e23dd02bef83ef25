"""Waiting for the local replica to apply a sequence number (a read's `min_seq`, a write's
answer): futures in a heap by seq, resolved from the Raft apply listener on the loop."""
from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Protocol

from tsched.node.errors import ApiError


class Applying(Protocol):
    """The local replica (`replica.Replica`), as far as waiting for it goes."""

    @property
    def applied_seq(self) -> int: ...


class SeqWatcher:
    """Futures resolved when the local replica has applied a given sequence number."""

    PRUNE_AT = 10_000   # entries; timed-out waits for far-off seqs are dropped past this

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future]] = []
        self._ids = itertools.count()

    def on_applied(self, seq: int) -> None:
        while self._heap and self._heap[0][0] <= seq:
            _, _, fut = heapq.heappop(self._heap)
            if not fut.done():
                fut.set_result(None)

    async def wait(self, seq: int, replica: Applying, timeout_s: float) -> None:
        if replica.applied_seq >= seq:
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (seq, next(self._ids), fut))
        if replica.applied_seq >= seq:      # applied between the check and the push
            return
        await asyncio.wait({fut}, timeout=timeout_s)   # never cancels fut (unlike wait_for)
        if not fut.done():
            fut.cancel()   # marks the heap entry dead
            if len(self._heap) > self.PRUNE_AT:
                self._heap = [e for e in self._heap if not e[2].done()]
                heapq.heapify(self._heap)
            raise ApiError("timeout", f"this node has not applied seq {seq} yet",
                           {"min_seq": seq, "applied_seq": replica.applied_seq}) from None
