"""Helpers for tests that run a real `Worker` against a real cluster: a worker running in
a thread for the length of a `with` block, and a bounded wait for a condition."""
from __future__ import annotations

import threading
from contextlib import contextmanager

from tsched.client import Worker

from .raft_support import wait_until

DEADLINE_S = 60.0


def wait_for(cond, what: str, timeout_s: float = DEADLINE_S):
    return wait_until(cond, timeout_s=timeout_s, what=what, step_s=0.05)


@contextmanager
def running(worker: Worker):
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(DEADLINE_S)
        assert not thread.is_alive(), "worker did not stop"
