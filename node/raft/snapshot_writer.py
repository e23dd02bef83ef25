"""This node's snapshot file, written by a forked child (DESIGN.md section 6).

The Raft thread pays only for the fork: the child writes and fsyncs the temp file at a low
priority, and the Raft thread, polled through pysyncobj's serializer checker, renames the
finished file into place (`SnapshotWriter.check`), so a snapshot installed from the leader
meanwhile is never overwritten by an older one; installing one abandons the child first.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import time
from pathlib import Path
from typing import Callable

from pysyncobj import SyncObj
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.node import Node

from tsched.node.raft.snapshot_file import publish_snapshot, snapshot_tmp_path, write_snapshot
from tsched.node.raft.syncobj_adapter import Entry, unblock_snapshot_sending

log = logging.getLogger("tsched.node.raft.replica")   # the replica's log lines, as they were


class SnapshotWriter:
    """The snapshot child of one replica, what it cost, and the size of the newest file."""

    def __init__(self, path: Path, child_nice: int) -> None:
        self.path = path
        self._child_nice = child_nice
        self.pid: int | None = None
        self._abandoned = False
        self._file_bytes: int | None = None   # file_bytes, read lazily
        self.stalls_ms: list[float] = []      # the Raft thread's stall for each fork
        self.written = 0

    @property
    def busy(self) -> bool:
        return self.pid is not None

    def fork(self, data: tuple[Entry, Entry, set[Node]], state: Callable[[], bytes],
             cluster_of: Callable[[set[Node]], list] | None = None) -> None:
        """Fork a child that writes `state()` with pysyncobj's raft data `data`.

        pysyncobj then tries to rename its own temp file, which does not exist; that
        failure is expected and ignored because `check` reports the outcome."""
        last, prev, cluster = data
        members = cluster_of(cluster) if cluster_of else sorted(n.id for n in cluster)
        raft_data = [list(last), list(prev), members]
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            code = 1
            gc.disable()   # a short-lived child: collections would only walk the state
            try:
                os.nice(self._child_nice)
                write_snapshot(self.path, raft_data, state())
                code = 0
            finally:
                os._exit(code)
        self.pid = pid
        stall_ms = (time.perf_counter() - started) * 1000
        self.stalls_ms.append(stall_ms)
        log.info("raft: snapshot at index %d forked (Raft thread stalled %.1f ms)", last[1],
                 stall_ms)

    def check(self, obj: SyncObj | None) -> int:
        """pysyncobj's serializer checker: the child's outcome, the file published on success."""
        # pysyncobj's Serializer, after calling the serializer, fails to rename a temp file
        # of its own and marks itself busy (pid -2) until the checker reports an outcome;
        # while busy it sends no snapshot to a follower that needs one. A follower catching
        # up at 1,000,000 tasks thus waited for a whole snapshot to be written (tens of
        # seconds) before its transfer even started. Ours are written by our own child and
        # published by an atomic rename, so the snapshot file is always complete: let it go.
        unblock_snapshot_sending(obj)
        if self._abandoned:
            self._abandoned = False
            return SERIALIZER_STATE.FAILED      # lets pysyncobj start the next one
        if self.pid is None:
            return SERIALIZER_STATE.NOT_SERIALIZING
        status = self._reap(block=False)
        if status is None:
            return SERIALIZER_STATE.SERIALIZING
        if status != 0:
            log.error("raft: snapshot child failed (wait status %d)", status)
            return SERIALIZER_STATE.FAILED
        try:
            publish_snapshot(self.path)
            self._file_bytes = None
        except OSError as exc:
            log.error("raft: could not publish the snapshot: %r", exc)
            return SERIALIZER_STATE.FAILED
        self.written += 1
        return SERIALIZER_STATE.SUCCESS

    def abandon(self) -> None:
        """Kill and reap the child, if any; its unpublished file is simply not taken."""
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._reap(block=True)
        self._abandoned = True
        with contextlib.suppress(FileNotFoundError):
            snapshot_tmp_path(self.path).unlink()

    def _reap(self, block: bool) -> int | None:
        pid = self.pid
        if pid is None:
            return None
        rpid, status = os.waitpid(pid, 0 if block else os.WNOHANG)
        if rpid == 0:
            return None
        self.pid = None
        return status

    @property
    def file_bytes(self) -> int:
        """The size of the newest snapshot file (0 without one): written here, received
        from the leader, or found at start. Read once per new snapshot, not per tick."""
        if self._file_bytes is None:
            try:
                self._file_bytes = self.path.stat().st_size
            except OSError:
                self._file_bytes = 0
        return self._file_bytes

    def forget_file_bytes(self) -> None:
        """Another snapshot file is in place (one installed from the leader)."""
        self._file_bytes = None
