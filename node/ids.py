"""Fresh random ids (task ids, request ids), drawn from the kernel in bulk.

Every submitted task takes two ids. `os.urandom` releases the GIL around its `getrandom`
call, and under load the Raft thread takes the GIL at each such release: the event loop
then waits for it (up to the switch interval) once per id, a thousand times for a submit
of 500 tasks. Reading `IDS_PER_READ` ids' worth of bytes at once makes that one release
per `IDS_PER_READ` ids.

The pool is per process and emptied in a forked child (the node forks for snapshots): a
child must never hand out an id its parent holds too.
"""
from __future__ import annotations

import os

ID_BYTES = 16            # 128 random bits, as uuid4, rendered as 32 hex digits
IDS_PER_READ = 256       # 4 KiB from the kernel per read


class IdPool:
    """Ids read from `os.urandom` `IDS_PER_READ` at a time. `take()` is safe from any
    thread: `list.pop` is atomic, and two threads refilling at once only read twice."""

    def __init__(self) -> None:
        self._ids: list[str] = []

    def take(self) -> str:
        try:
            return self._ids.pop()
        except IndexError:
            pass
        raw = os.urandom(ID_BYTES * IDS_PER_READ).hex()
        width = 2 * ID_BYTES
        fresh = [raw[i:i + width] for i in range(0, len(raw), width)]
        taken = fresh.pop()
        self._ids = fresh
        return taken

    def clear(self) -> None:
        self._ids = []


_POOL = IdPool()
os.register_at_fork(after_in_child=_POOL.clear)


def new_id() -> str:
    """128 random bits as 32 hex digits, like `uuid4().hex`: unique across nodes and
    restarts."""
    return _POOL.take()
