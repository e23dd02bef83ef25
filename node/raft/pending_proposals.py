"""The batches this node proposed, kept with the commands they encode until applied.

A replica applies its own entries (a leader every entry it proposed, a follower the
batches it forwarded) from bytes it encoded a moment before, and decoding them again was a
measurable share of a leader's time (bench/notes/2026-12-02-minimal-claims.md). So `Replica`
keeps each proposed batch's commands here and, applying an entry whose bytes are exactly
those of a kept batch, takes its commands instead of decoding (the codec's round trip is
exact: `decode_batch(encode_batch(cmds)) == cmds`, tests/unit/statemachine/test_sm_codec.py).

An entry is looked up by its length and first bytes (the first command's request id, unique
per batch), then compared whole, so a different entry is never taken for a kept one: a
miss only means decoding. Bounded in entries and bytes: batches that never commit (the
leadership went) leave oldest first.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

HEAD_BYTES = 64          # a format 2 batch starts with its first command's tag and request id
ENTRIES_MAX = 256        # far more than a leader has in flight (its pipeline is a few entries)
BYTES_MAX = 64 << 20


class ProposedBatches:
    def __init__(self, as_batch: Callable[[list, bytes], list]) -> None:
        self._as_batch = as_batch       # the commands as the state machine takes a batch
        self._lock = threading.Lock()   # proposals come from the event loop, takes from Raft
        self._kept: OrderedDict[tuple[int, bytes], tuple[bytes, list]] = OrderedDict()
        self._bytes = 0
        self.taken = 0                  # entries applied without decoding

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, blob: bytes, cmds: list) -> None:
        key = (len(blob), blob[:HEAD_BYTES])
        with self._lock:
            if key in self._kept:
                return                  # the same head twice: the later one is decoded
            self._kept[key] = (blob, cmds)
            self._bytes += len(blob)
            while len(self._kept) > ENTRIES_MAX or self._bytes > BYTES_MAX:
                _, (old, _) = self._kept.popitem(last=False)
                self._bytes -= len(old)

    def take(self, blob: bytes) -> list | None:
        """The commands of `blob` if this node proposed exactly these bytes, else None."""
        if not self._kept:
            return None
        with self._lock:
            hit = self._kept.pop((len(blob), blob[:HEAD_BYTES]), None)
            if hit is not None:
                self._bytes -= len(hit[0])
        if hit is None or hit[0] != blob:
            return None
        self.taken += 1
        return self._as_batch(hit[1], blob)
