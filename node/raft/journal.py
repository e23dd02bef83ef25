"""The Raft log in LMDB, with group commit (DESIGN.md section 6).

pysyncobj's own FileJournal never fsyncs and caps the file at 4 GiB. `LmdbJournal` keeps an
in-memory mirror of the log (pysyncobj indexes and slices it on every tick, and compaction
keeps it short), buffers every change since the last sync, and makes all of them durable in
one LMDB write transaction when `sync()` is called: the transport calls it before any vote or
replication message leaves the node, so one fsync covers every entry appended meanwhile.
Term and vote are made durable at once, because a vote must never be forgotten.

Layout: database `log` maps an 8-byte big-endian index to a 4-byte CRC32C, an 8-byte term
and the entry's bytes; the CRC covers the key, the term and the bytes, so a flipped byte in
any of them (or an entry moved to another key) is found when the log is loaded at start,
which is the only time this module reads LMDB (pysyncobj reads the in-memory mirror).
Database `meta` holds `term`, `vote`, `commit` and `format` (`LOG_FORMAT`). A log without
`format` was written before checksums (format 1: term plus bytes): it is rewritten with
checksums, in one transaction, when it is opened.

pysyncobj is handed an `LmdbJournal` through `journal_hook.py`.
"""
from __future__ import annotations

import logging
import os
import queue
import struct
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Callable, NamedTuple, overload

import crc32c
import lmdb
import msgpack
from pysyncobj import journal as _pysyncobj_journal

from tsched.node.raft.storage_faults import CorruptStorage, fatal_storage_error
from tsched.node.raft.syncobj_adapter import Entry

log = logging.getLogger(__name__)

MAP_SIZE_BYTES = 64 << 30        # sparse: LMDB only reserves address space
_KEY = struct.Struct(">Q")
_TERM = struct.Struct(">Q")
_CRC = struct.Struct(">I")
LOG_FORMAT = 2                   # 1: term + bytes (no checksum); 2: crc32c + term + bytes


def _log_value(key: bytes, term: int, command: bytes) -> bytes:
    body = _TERM.pack(term) + command
    return _CRC.pack(crc32c.crc32c(body, crc32c.crc32c(key))) + body


def _format_of(meta: dict, entries: int) -> int:
    """The log's format: a log with entries or a term but no `format` predates checksums."""
    if b"format" in meta:
        return msgpack.unpackb(meta[b"format"])
    return 1 if entries or b"term" in meta else LOG_FORMAT


def _parse_value(file: Path, key: bytes, value: bytes, fmt: int) -> tuple[int, bytes]:
    """(term, command) of a stored entry; raises CorruptStorage on a checksum mismatch."""
    idx = _KEY.unpack(key)[0] if len(key) == _KEY.size else key.hex()
    if fmt >= 2:
        if len(value) < _CRC.size + _TERM.size:
            raise CorruptStorage(file, f"log index {idx}", f"entry of {len(value)} bytes is too short")
        (stored,) = _CRC.unpack_from(value)
        body = value[_CRC.size:]
        if crc32c.crc32c(body, crc32c.crc32c(key)) != stored:
            raise CorruptStorage(file, f"log index {idx}", "checksum mismatch")
        value = body
    return _TERM.unpack_from(value)[0], bytes(value[_TERM.size:])


class LmdbJournal(_pysyncobj_journal.Journal):
    """pysyncobj's Journal interface over LMDB. Entries are (command, idx, term) tuples."""

    def __init__(self, path: str | os.PathLike, *, map_size_bytes: int = MAP_SIZE_BYTES,
                 fsync: bool = True, trim_before_idx: int | None = None) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        env = lmdb.open(str(self.path), map_size=map_size_bytes, max_dbs=2,
                        sync=fsync, metasync=fsync, subdir=True, lock=True)
        self._env: lmdb.Environment | None = env     # None once closed
        self._log_db = env.open_db(b"log")
        self._meta_db = env.open_db(b"meta")
        self._format = LOG_FORMAT
        self._entries: list[Entry] = []
        self.bytes_held = 0              # command bytes in `_entries` (compaction by size)
        self._term = 0
        self._vote: str | None = None
        self._commit = 1
        self._load()
        self.startup_last_idx = self._entries[-1][1] if self._entries else 0
        # Buffered changes since the last sync: entries at idx >= _dirty_from_idx are to be
        # rewritten; keys below the first entry are to be deleted (front trimmed).
        self._dirty_from_idx: int | None = None
        self._front_trimmed = False
        self._meta_dirty = False
        self.syncs = 0                   # group commits so far (tests, metrics)
        # The log writer (`sync_soon`): group commits on a thread of their own, in order.
        # `durable_idx` is the last index a completed commit made durable (DESIGN 6, "own
        # durability"); written by whichever thread commits, read by the Raft thread.
        self.durable_idx = self.startup_last_idx
        # Moves at every truncation of the log's tail: `durable_idx` vouches for the entries
        # a deferred acknowledgement named only while the generation it was made in is the
        # one durable (`durable_generation`).
        self.generation = self.durable_generation = 0
        self.on_durable: Callable[[], None] = lambda: None
        self.stall_path: Path | None = None     # failpoint `stall_log_writer`
        self.stalled = False                     # the writer waits on `stall_path` (tests)
        self._writes: queue.SimpleQueue[_Write | None] | None = None
        self._writer: threading.Thread | None = None
        if trim_before_idx is not None:
            self.trim_front_to(trim_before_idx)
            self.sync()

    @property
    def _open_env(self) -> lmdb.Environment:
        assert self._env is not None, f"the Raft log in {self.path} is used after close()"
        return self._env

    # --- loading ---------------------------------------------------------------------

    @property
    def data_file(self) -> Path:
        return self.path / "data.mdb"

    def _load(self) -> None:
        try:
            self._read_all()
        except lmdb.Error as exc:     # a damaged page: LMDB's own structure check
            raise CorruptStorage(self.data_file, "log", repr(exc)) from exc
        if self._format < LOG_FORMAT:
            self._migrate()

    def _read_all(self) -> None:
        with self._open_env.begin() as txn:
            meta = {bytes(k): bytes(v) for k, v in txn.cursor(db=self._meta_db)}
            self._format = _format_of(meta, txn.stat(self._log_db)["entries"])
            for key, value in txn.cursor(db=self._log_db):
                term, command = _parse_value(self.data_file, key, value, self._format)
                self._entries.append((command, _KEY.unpack(key)[0], term))
        for prev, cur in zip(self._entries, self._entries[1:]):
            if cur[1] != prev[1] + 1:
                raise CorruptStorage(self.data_file, f"log index {prev[1]}",
                                     f"gap: the next entry is {cur[1]}")
        if self._format >= 2:
            self._read_state(meta)
        else:
            self._read_legacy_meta(meta)
        self.bytes_held = _bytes_of(self._entries)

    def _read_state(self, meta: dict) -> None:
        """Term, vote, commit and the log's first and last index, checksummed together:
        a damaged page that hides the log's tail (acknowledged entries) is found here."""
        if b"state" not in meta:
            if self._entries:
                raise CorruptStorage(self.data_file, "log state", "missing")
            return
        raw = meta[b"state"]
        if len(raw) < _CRC.size or crc32c.crc32c(raw[_CRC.size:]) != _CRC.unpack_from(raw)[0]:
            raise CorruptStorage(self.data_file, "log state", "checksum mismatch")
        self._term, self._vote, self._commit, first, last = msgpack.unpackb(raw[_CRC.size:])
        held = (self._entries[0][1], self._entries[-1][1]) if self._entries else (0, 0)
        if held != (first, last):
            raise CorruptStorage(self.data_file, f"log index {held[1]}",
                                 f"the log holds {held[0]}..{held[1]}, written as {first}..{last}")

    def _read_legacy_meta(self, meta: dict) -> None:
        if b"term" in meta:
            self._term = msgpack.unpackb(meta[b"term"])
            self._vote = msgpack.unpackb(meta[b"vote"])
        if b"commit" in meta:
            self._commit = msgpack.unpackb(meta[b"commit"])

    def _migrate(self) -> None:
        """Rewrite a format-1 log (no checksums) with checksums, in one transaction."""
        log.info("raft log %s has format %d; adding checksums to its %d entries",
                    self.path, self._format, len(self._entries))
        with self._open_env.begin(write=True) as txn:
            for command, idx, term in self._entries:
                key = _KEY.pack(idx)
                txn.put(key, _log_value(key, term, command), db=self._log_db)
            self._write_meta(txn, self._state_record())
        self._format = LOG_FORMAT

    def trim_front_to(self, idx: int) -> None:
        """Drop entries before `idx` when `idx` is in the log (a snapshot covers them).

        A crash between writing a snapshot and syncing the trimmed front leaves extra old
        entries; pysyncobj would then discard the whole journal on load, so trim first."""
        first = self._entries[0][1] if self._entries else None
        if first is not None and first < idx <= self._entries[-1][1]:
            self.deleteEntriesTo(idx - first)

    # --- pysyncobj's Journal interface (called on the Raft thread) --------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        if self._entries and idx <= self._entries[-1][1]:
            if self._kept_committed(idx, term):
                return
        command = bytes(command)
        self._entries.append((command, idx, term))
        self.bytes_held += len(command)
        self._mark_from(idx)

    def _kept_committed(self, idx: int, term: int) -> bool:
        """An entry re-sent at an index kept by `deleteEntriesFrom`: identical, or (never,
        by Raft's rules) a conflict, handled as pysyncobj would by truncating there."""
        pos = idx - self._entries[0][1]
        if 0 <= pos < len(self._entries) and self._entries[pos][2] == term:
            return True
        log.critical("raft: entry %d of term %d conflicts with a committed entry; truncating",
                     idx, term)
        self._mark_from(self._entries[max(pos, 0)][1])
        self._drop_back(max(pos, 0))
        self.generation += 1
        return False

    def clear(self) -> None:
        if self._entries:
            self._mark_from(self._entries[0][1])
        self._dirty_from_idx = 0
        self._entries = []
        self.bytes_held = 0
        self.generation += 1

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        # pysyncobj truncates every entry after the leader's prevLogIdx, conflicting or not,
        # and a reset nextIndex can make a leader re-send from far back: acked, committed
        # entries would vanish from the durable log until re-sent. Committed entries never
        # conflict (Raft's leader completeness), so keep them; `add` skips their re-sends.
        if self._entries:
            entryFrom = max(entryFrom, self._commit - self._entries[0][1] + 1)
        if entryFrom < len(self._entries):
            self._mark_from(self._entries[entryFrom][1])
            self._drop_back(entryFrom)
            self.generation += 1

    def deleteEntriesTo(self, entryTo: int) -> None:
        if entryTo > 0:
            self.bytes_held -= _bytes_of(self._entries[:entryTo])
            self._entries = self._entries[entryTo:]
            self._front_trimmed = True

    def _drop_back(self, pos: int) -> None:
        self.bytes_held -= _bytes_of(self._entries[pos:])
        del self._entries[pos:]

    def applied_bytes(self, last_applied_idx: int, scan_max: int = 64) -> int:
        """Command bytes of the entries up to `last_applied_idx` (what a snapshot taken now
        would let go), or 0 when more than `scan_max` entries are still to apply: a node
        catching up compacts after it caught up, not at every step."""
        held, entries = self.bytes_held, self._entries
        for i in range(len(entries) - 1, max(-1, len(entries) - 1 - scan_max), -1):
            if entries[i][1] <= last_applied_idx:
                return held
            held -= len(entries[i][0])
        return held if len(entries) <= scan_max else 0

    @overload
    def __getitem__(self, item: int) -> Entry: ...

    @overload
    def __getitem__(self, item: slice) -> list[Entry]: ...

    def __getitem__(self, item: int | slice) -> Entry | list[Entry]:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        self.close()

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        # Persisted with the next group commit: a stale commit index is only a hint.
        if raftCommitIndex != self._commit:
            self._commit = raftCommitIndex
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:
        return self._commit

    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        self._term, self._vote = term, votedForNodeId
        self._meta_dirty = True
        self.sync()

    def getCurrentTerm(self) -> int:
        return self._term

    def getVotedForNodeId(self) -> str | None:
        return self._vote

    def onOneSecondTimer(self) -> None:
        pass

    # --- group commit ----------------------------------------------------------------

    def _mark_from(self, idx: int) -> None:
        if self._dirty_from_idx is None or idx < self._dirty_from_idx:
            self._dirty_from_idx = idx

    @property
    def dirty(self) -> bool:
        return self._dirty_from_idx is not None or self._front_trimmed or self._meta_dirty

    def sync(self) -> None:
        """Make every buffered change durable (fsync on commit) before returning: after any
        commit handed to the writer (`sync_soon`) before it, in order."""
        write = self._take_write()
        if self._writes is None:
            if write is not None:
                self._commit_write([write])
            return
        done = threading.Event()
        self._writes.put(_Write(write, done))
        done.wait()

    def sync_soon(self) -> None:
        """Hand every buffered change to the log writer and return at once: the writer
        commits it (one fsync) while the Raft thread goes on; `durable_idx` moves, and
        `on_durable` is called, once it is on disk."""
        write = self._take_write()
        if write is None:
            return
        if self._writes is None:
            self._start_writer()
        assert self._writes is not None
        self._writes.put(_Write(write, None))

    def _take_write(self) -> _Batch | None:
        """The buffered changes as one batch (copies: the Raft thread goes on changing the
        log), and the buffer emptied; None when nothing is buffered."""
        if not self.dirty:
            return None
        puts: list[Entry] = []
        if self._dirty_from_idx is not None:
            puts = self._entries[self._position_of(self._dirty_from_idx):]
        batch = _Batch(self._dirty_from_idx, puts,
                       self._entries[0][1] if self._front_trimmed and self._entries else None,
                       self._state_record(),
                       self._entries[-1][1] if self._entries else 0, self.generation)
        self._dirty_from_idx = None
        self._front_trimmed = False
        self._meta_dirty = False
        return batch

    def _start_writer(self) -> None:
        self._writes = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_loop, name="raft-log-writer",
                                        daemon=True)
        self._writer.start()

    def _write_loop(self) -> None:
        writes = self._writes
        assert writes is not None
        while (item := writes.get()) is not None:
            items: list[_Write] = [item]
            # Group commit at the writer too: every batch queued meanwhile goes in the same
            # transaction (one fsync), in order; a waiting `sync` or the stop ends the group.
            stop = False
            while items[-1].done is None and not writes.empty():
                more = writes.get()
                if more is None:
                    stop = True
                    break
                items.append(more)
            if any(i.done is None for i in items):
                self._stall()
            batches = [i.batch for i in items if i.batch is not None]
            durable = (self.durable_idx, self.durable_generation)
            if batches:
                self._commit_write(batches)
            for i in items:
                if i.done is not None:
                    i.done.set()
            # Only what entries are durable moves a commit or an acknowledgement: a commit
            # of the meta record alone (the commit index moved) wakes nobody.
            if (self.durable_idx, self.durable_generation) != durable:
                self.on_durable()
            if stop:
                return

    def _stall(self) -> None:
        """The `stall_log_writer` failpoint: a disk that does not answer while the file is
        there (polled: this stands in for a slow device, not for synchronisation)."""
        while self.stall_path is not None and self.stall_path.exists():
            self.stalled = True
            time.sleep(0.01)
        self.stalled = False

    def _commit_write(self, batches: list[_Batch]) -> None:
        while True:
            try:
                with self._open_env.begin(write=True) as txn:
                    for batch in batches:
                        self._write(txn, batch)
                    self._write_meta(txn, batches[-1].state)   # the newest is the log's
                break
            except lmdb.MapFullError:
                self._grow()
            except lmdb.Error as exc:
                fatal_storage_error(f"syncing the Raft log in {self.path}", exc)
        self.durable_idx = batches[-1].last_idx
        self.durable_generation = batches[-1].generation
        self.syncs += 1

    def _write(self, txn: lmdb.Transaction, batch: _Batch) -> None:
        if batch.dirty_from_idx is not None:
            self._delete_from(txn, batch.dirty_from_idx)
            for command, idx, term in batch.puts:
                key = _KEY.pack(idx)
                txn.put(key, _log_value(key, term, command), db=self._log_db)
        if batch.first_idx is not None:
            self._delete_before(txn, batch.first_idx)

    def _state_record(self) -> bytes:
        span = (self._entries[0][1], self._entries[-1][1]) if self._entries else (0, 0)
        state = msgpack.packb([self._term, self._vote, self._commit, *span])
        return _CRC.pack(crc32c.crc32c(state)) + state

    def _write_meta(self, txn: lmdb.Transaction, state: bytes) -> None:
        txn.put(b"state", state, db=self._meta_db)
        txn.put(b"format", msgpack.packb(LOG_FORMAT), db=self._meta_db)

    def _position_of(self, idx: int) -> int:
        if not self._entries:
            return 0
        return max(0, idx - self._entries[0][1])

    def _delete_from(self, txn: lmdb.Transaction, idx: int) -> None:
        cursor = txn.cursor(db=self._log_db)
        if cursor.set_range(_KEY.pack(idx)):
            while cursor.delete():
                pass

    def _delete_before(self, txn: lmdb.Transaction, idx: int) -> None:
        cursor = txn.cursor(db=self._log_db)
        if not cursor.first():
            return
        while cursor.key() and _KEY.unpack(cursor.key())[0] < idx:
            if not cursor.delete():
                break

    def _grow(self) -> None:
        size = self._open_env.info()["map_size"] * 2
        log.warning("Raft log map full; growing LMDB map to %d bytes", size)
        self._open_env.set_mapsize(size)

    def close(self) -> None:
        if self._env is not None:
            try:
                self.sync()
                self._stop_writer()
            finally:
                self._env.close()
                self._env = None

    def _stop_writer(self) -> None:
        if self._writes is not None and self._writer is not None:
            self._writes.put(None)
            self._writer.join()
            self._writes = self._writer = None


class _Batch(NamedTuple):
    """Buffered changes taken for one group commit."""
    dirty_from_idx: int | None    # rewrite from here (delete the keys from it, put `puts`)
    puts: list[Entry]
    first_idx: int | None         # the front was trimmed: delete the keys before it
    state: bytes                  # the meta record (term, vote, commit, span), checksummed
    last_idx: int                 # the log's last index: durable once committed
    generation: int               # the log's generation (truncations) when taken


class _Write(NamedTuple):
    batch: _Batch | None
    done: threading.Event | None  # `sync` waits on it; None: `sync_soon`


def _bytes_of(entries: Iterable[Entry]) -> int:
    return sum(len(e[0]) for e in entries)


def read_entries(path: str | os.PathLike[str]) -> list[Entry]:
    """The durable log of a closed journal (tests, tools): what a restart would see."""
    journal = LmdbJournal(path)
    try:
        return list(journal._entries)
    finally:
        journal._open_env.close()
        journal._env = None

