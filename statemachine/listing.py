"""Ordered indexes for listing tasks newest first (by submission `seq`) with a cursor.

A `SeqIndex` holds tasks in blocks of 1,024 consecutive seqs. A page walks the blocks from
the cursor downwards and sorts one block at a time, so listing by state or by tenant costs
the page plus at most a block, never a scan of every task. Insert and remove are O(1) plus a
bisect on the (small) list of block ids. Derived state: rebuilt from the tasks on restore.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator

from .model import Task

_BLOCK_BITS = 10


class SeqIndex:
    __slots__ = ("blocks", "block_ids", "count")

    def __init__(self) -> None:
        self.blocks: dict[int, dict[int, Task]] = {}
        self.block_ids: list[int] = []
        self.count = 0

    def add(self, task: Task) -> None:
        bid = task.seq >> _BLOCK_BITS
        block = self.blocks.get(bid)
        if block is None:
            block = self.blocks[bid] = {}
            insort(self.block_ids, bid)
        block[task.seq] = task
        self.count += 1

    def append(self, task: Task) -> None:
        """`add` for a task whose seq is above every seq held (a restore, in seq order)."""
        bid = task.seq >> _BLOCK_BITS
        block = self.blocks.get(bid)
        if block is None:
            if self.block_ids and bid < self.block_ids[-1]:
                self.add(task)
                return
            block = self.blocks[bid] = {}
            self.block_ids.append(bid)
        block[task.seq] = task
        self.count += 1

    def remove(self, task: Task) -> None:
        bid = task.seq >> _BLOCK_BITS
        block = self.blocks[bid]
        del block[task.seq]
        self.count -= 1
        if not block:
            del self.blocks[bid]
            del self.block_ids[bisect_left(self.block_ids, bid)]

    def newest_first(self, before_seq: int | None = None) -> Iterator[Task]:
        """Tasks with seq < before_seq (all when None), newest first."""
        if before_seq is None:
            i = len(self.block_ids)
        else:
            i = bisect_right(self.block_ids, (before_seq - 1) >> _BLOCK_BITS)
        while i > 0:
            i -= 1
            block = self.blocks[self.block_ids[i]]
            for seq in sorted(block, reverse=True):
                if before_seq is None or seq < before_seq:
                    yield block[seq]

    def oldest_first(self) -> Iterator[Task]:
        """Every task in ascending seq order (snapshots)."""
        for bid in self.block_ids:
            block = self.blocks[bid]
            for seq in sorted(block):
                yield block[seq]

    def __len__(self) -> int:
        return self.count
