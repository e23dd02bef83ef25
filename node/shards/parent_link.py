"""A shard process's link to the supervisor that started it (shards/supervisor.py): it
dies with it, by the kernel's parent-death signal where Linux gives one, else by watching
its parent's pid."""
from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import sys

log = logging.getLogger("tsched.node.supervisor")

PARENT_CHECK_S = 1.0
SUPERVISOR_PID_ENV = "TSCHED_SUPERVISOR_PID"   # set by the supervisor in its children
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to send SIGTERM to this process when its parent (the supervisor) dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass     # the parent-pid watch below still ends the process


async def watch_parent(stop: asyncio.Event) -> None:
    """Stop when the supervisor that started this process is gone (re-parented)."""
    want = os.environ.get(SUPERVISOR_PID_ENV)
    if not want:
        return
    if os.getppid() != int(want):
        stop.set()
        return
    while not stop.is_set():
        await asyncio.sleep(PARENT_CHECK_S)
        if os.getppid() != int(want):
            log.warning("event=supervisor_gone shard_process_stopping=true")
            stop.set()
