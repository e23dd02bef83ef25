"""Ordered indexes for listing tasks newest first (by submission `seq`) with a cursor.

A `SeqIndex` holds tasks in blocks of 1,024 consecutive seqs, each block a list sorted by
seq. A page walks the blocks from the cursor downwards, so listing by state or by tenant
costs the page plus at most a block, never a scan of every task. Insert and remove are a
bisect in one block (at most 1,024 entries) plus a bisect on the (small) list of block ids;
inserting in seq order, as submissions and restores do, is an append.

Memory: a list slot is 8 bytes per task, where a dict keyed by seq cost about 36; the
machine keeps four of these indexes over every task (all, by state, by tenant, by task
type) and one over cron occurrences (by schedule id). Derived state: rebuilt from the
tasks on restore.

A task's `created_at_ms` is the state clock when it entered, and its seq the next of the
machine's count, so within any index creation times never decrease with seq (re-sharding
renumbers in creation order): `seq_created_before` finds a creation time's place by bisection.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from operator import attrgetter

from .model import Task

_BLOCK_BITS = 10
_seq = attrgetter("seq")
_created = attrgetter("created_at_ms")


class SeqIndex:
    __slots__ = ("blocks", "block_ids", "count")

    def __init__(self) -> None:
        self.blocks: dict[int, list[Task]] = {}
        self.block_ids: list[int] = []
        self.count = 0

    def add(self, task: Task) -> None:
        seq = task.seq
        bid = seq >> _BLOCK_BITS
        block = self.blocks.get(bid)
        if block is None:
            self.blocks[bid] = [task]
            insort(self.block_ids, bid)
        elif block[-1].seq < seq:
            block.append(task)
        else:
            block.insert(bisect_left(block, seq, key=_seq), task)
        self.count += 1

    def remove(self, task: Task) -> None:
        seq = task.seq
        bid = seq >> _BLOCK_BITS
        block = self.blocks[bid]
        # Tasks mostly leave a state in the order they entered it (claimed oldest first,
        # completed in claim order): the block's first entry, without a search.
        i = 0 if block[0] is task else bisect_left(block, seq, key=_seq)
        if i == len(block) or block[i] is not task:
            raise KeyError(seq)
        del block[i]
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
            end = len(block) if before_seq is None else bisect_left(block, before_seq, key=_seq)
            for j in range(end - 1, -1, -1):
                yield block[j]

    def seq_created_before(self, created_ms: int) -> int | None:
        """The seq of the oldest task created at or after `created_ms` (tasks below it were
        created before it), or None when every task was created before it. O(log n)."""
        blocks = self.blocks
        i = bisect_left(self.block_ids, created_ms, key=lambda bid: blocks[bid][-1].created_at_ms)
        if i == len(self.block_ids):
            return None
        block = blocks[self.block_ids[i]]
        return block[bisect_left(block, created_ms, key=_created)].seq

    def oldest_first(self) -> Iterator[Task]:
        """Every task in ascending seq order (snapshots)."""
        for bid in self.block_ids:
            yield from self.blocks[bid]

    def __len__(self) -> int:
        return self.count
