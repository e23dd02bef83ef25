"""Small disks for the `disk_full` fault: a tmpfs mounted on each node's data dir.

Mounting needs the right to (root, as in the development containers); where it is refused
there are no small disks and the nemesis records the fault as skipped, with the reason.
Filling writes one file until the disk reports ENOSPC; freeing deletes it.
"""
from __future__ import annotations

import errno
import os
import subprocess

DISK_BYTES = 256 << 20
FILL_CHUNK_BYTES = 1 << 20
FILLER_NAME = "FILLER"


class SmallDisks:
    def __init__(self, size_bytes: int = DISK_BYTES) -> None:
        self.size_bytes = size_bytes
        self.mounted: dict[str, str] = {}     # node id -> mount point (its data dir)
        self.refused: str | None = None

    def mount(self, nid: str, path: str) -> bool:
        os.makedirs(path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes}", "tmpfs",
                            path], capture_output=True, text=True)
        if r.returncode != 0:
            self.refused = (r.stderr or "").strip() or f"mount exited {r.returncode}"
            return False
        self.mounted[nid] = path
        return True

    def fill(self, nid: str) -> int:
        """Write until the disk is full; the bytes written. Only ever on its own small
        mount and never more than its size: a data dir whose tmpfs is gone (unmounted
        under a run) is on the machine's real disk, which this must never fill."""
        path = self.mounted[nid]
        if not os.path.ismount(path):
            raise RuntimeError(f"{path} is no longer a mount point: not filling the disk under it")
        written = 0
        chunk = b"\0" * FILL_CHUNK_BYTES
        with open(os.path.join(path, FILLER_NAME), "ab", buffering=0) as f:
            while written <= self.size_bytes:
                try:
                    written += f.write(chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    return written
        raise RuntimeError(f"{path} took {written} bytes without filling: not a small disk")

    def free(self, nid: str) -> None:
        try:
            os.unlink(os.path.join(self.mounted[nid], FILLER_NAME))
        except FileNotFoundError:
            pass

    def unmount_all(self) -> None:
        for path in self.mounted.values():
            subprocess.run(["umount", "-l", path], capture_output=True)
        self.mounted.clear()
