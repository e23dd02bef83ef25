"""Damaged or unwritable Raft storage stops the node (DESIGN.md section 6).

The Raft log (journal.py), the snapshot files (snapshot_file.py, snapshot_loader.py) and the
members file (membership.py) are checked when read; a mismatch raises `CorruptStorage`, and
the node exits with `STORAGE_CORRUPT_EXIT_CODE` (76) before it serves, votes or acks anything
(`fatal_corruption`). A failed write exits with `STORAGE_ERROR_EXIT_CODE` (74). The exit
codes are part of the operator's contract (deploy units, the shard supervisor)."""
from __future__ import annotations

import logging
import os
from typing import NoReturn

# The log lines of these failures keep the logger they always had.
log = logging.getLogger("tsched.node.raft.journal")

STORAGE_ERROR_EXIT_CODE = 74
STORAGE_CORRUPT_EXIT_CODE = 76


class CorruptStorage(ValueError):
    """A checksum or structure check failed on data this node wrote: the file and where."""

    def __init__(self, file: str | os.PathLike[str], where: str, detail: str) -> None:
        super().__init__(f"{file}: {where}: {detail}")
        self.file, self.where, self.detail = str(file), where, detail


def fatal_corruption(exc: CorruptStorage) -> NoReturn:
    """Damaged data must never be served or voted with: stop loudly, naming the damage
    and the way back (`tsnode --rejoin-empty`)."""
    log.critical("storage corrupt: %s; stopping the node (discard this node's data and "
                 "rejoin with `tsnode --rejoin-empty`)", exc)
    logging.shutdown()
    os._exit(STORAGE_CORRUPT_EXIT_CODE)


def fatal_storage_error(what: str, exc: BaseException) -> NoReturn:
    """A node that cannot write its log must not keep voting or acking: stop loudly."""
    log.critical("storage error while %s: %r; stopping the node", what, exc)
    logging.shutdown()
    os._exit(STORAGE_ERROR_EXIT_CODE)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or unlink in `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
