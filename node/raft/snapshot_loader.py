"""Loading a snapshot file into a replica: the file made durable, read with its checksums
checked, and the state restored with the cyclic GC out of the way. A damaged or unreadable
snapshot stops the node (pysyncobj would carry on with an empty state)."""
from __future__ import annotations

import gc
import logging
import os
import time
from pathlib import Path
from collections.abc import Sequence
from typing import Callable, TypeVar

from pysyncobj.node import Node

from tsched.node.gcpolicy import GcPolicy
from tsched.node.raft.transport import DialNode
from tsched.node.raft.snapshot_file import read_snapshot
from tsched.node.raft.storage_faults import (
    CorruptStorage, fatal_corruption, fatal_storage_error, fsync_dir)
from tsched.node.raft.syncobj_adapter import Entry
from tsched.node.raft.watchdog import Watchdog

log = logging.getLogger("tsched.node.raft.replica")   # the replica's log lines, as they were

State = TypeVar("State")


def make_durable(path: Path) -> None:
    """A snapshot received from the leader was renamed into place by pysyncobj without
    fsync: sync the file and its directory before it is relied upon."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)


def restore_frozen(restore: Callable[[bytes], State], state: bytes,
                   swap_in: Callable[[State], bool]) -> State:
    """Restore with collections paused, and move the restored state out of the cyclic
    GC's walks (`GcPolicy.after_restore`) before they resume: otherwise the first young
    collection walks every restored object (about a second at 1,000,000 tasks, before
    the node serves its first read). A state installed over one that has applied
    commands is swapped in first (`swap_in` returns whether it did), then everything is
    unfrozen and collected once: the old state's reference cycles (the machine and its
    handlers) would never be reclaimed while frozen, and GcPolicy freezes the survivors of
    full collections."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        sm = restore(state)
        if swap_in(sm):
            gc.unfreeze()
            gc.collect()
        GcPolicy.after_restore()
        return sm
    finally:
        if enabled:
            gc.enable()


def load(path: Path, watchdog: Watchdog,
         restore: Callable[[bytes], State]) -> tuple[tuple[Entry, Entry, set[Node]], State]:
    """(pysyncobj's raft data: last and previous entries and the cluster, the restored
    state) of the snapshot at `path`."""
    try:
        make_durable(path)
        started = time.perf_counter()
        with watchdog.busy("restoring a snapshot"):
            raft_data, state = read_snapshot(path)
            sm = restore(state)
        # its index is its last entry's, the one a backup names (raft_data[1] is the one before)
        log.info("raft: snapshot at index %d restored in %.2f s (%d bytes)",
                 raft_data[0][1], time.perf_counter() - started, len(state))
    except CorruptStorage as exc:
        watchdog.mark_fatal(str(exc))
        fatal_corruption(exc)
    except Exception as exc:
        # pysyncobj would log this and carry on with an empty state: never do that.
        fatal_storage_error(f"loading snapshot {path}", exc)
    last, prev, cluster = raft_data
    return (_entry(last), _entry(prev), {_member_node(m) for m in cluster}), sm


def _member_node(m: str | list[str] | tuple[str, ...]) -> DialNode:
    """A member as the snapshot names it: its Raft address, or [raft, id, http]
    (membership.py). Nodes, not strings: pysyncobj compares them with its own node."""
    if isinstance(m, (list, tuple)):
        return DialNode(str(m[0]), name=str(m[1]), http=str(m[2]))
    return DialNode(str(m))


def _entry(e: Sequence[bytes | int]) -> Entry:
    return (bytes(e[0]), int(e[1]), int(e[2]))
