"""Helpers for tests that run a real `Worker` against a real cluster: a worker running in
a thread for the length of a `with` block."""
from __future__ import annotations

import threading
from contextlib import contextmanager

from tsched.client import Worker

DEADLINE_S = 60.0   # the bound of a worker test's waits (tests.harness.waits.wait_until)


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
