"""The running attempts a node saw start, so that metrics count each attempt's end once
and find lease expirations, which a Tick's result does not list (see AttemptTracker)."""
from __future__ import annotations

import heapq

from tsched.statemachine.model import Attempt, Task


class AttemptTracker:
    """The running attempts this node saw start, to count how they end.

    A Tick's result is empty, so lease expirations are found here: attempts are kept by
    (task_id, fencing_token) with their live Task, in a heap by lease deadline. When the
    state clock passes a deadline, the task tells what happened: still running under the
    same token means a heartbeat extended the lease (re-queued); an attempt that ended
    "lease_expired" or "timed_out" is an expiration. Completions and failures remove their
    attempt, so a repeated report (same token) is not counted twice. Memory is bounded by
    the running tasks; the work per tick by the deadlines that passed.
    """

    # An attempt still shown running this long after its deadline belongs to a state that
    # a snapshot install replaced: forget it uncounted.
    ORPHAN_GRACE_MS = 60_000
    # Ended attempts leave their heap entry behind (lazy deletion), and only a Tick pops
    # entries. Under a steady load whose tasks finish within their leases no Tick is due
    # for minutes: the heap held every attempt since the last one, and the next Tick walked
    # them all with the GIL held, on every node at once, long enough for an election
    # (bench/notes/2026-12-01-soak.md). So the heap is
    # rebuilt from the live attempts whenever it holds more than twice as many entries
    # (plus this slack): amortized O(1) per attempt, and bounded by the running tasks.
    HEAP_SLACK = 1_024

    def __init__(self) -> None:
        self._live: dict[tuple[str, int], Task] = {}
        self._heap: list[tuple[int, int, str]] = []

    def __len__(self) -> int:
        return len(self._live)

    def started(self, task: Task) -> bool:
        """A claimed task; False when this attempt is known already (a repeated answer)."""
        key = (task.task_id, task.fencing_token)
        if key in self._live:
            return False
        self._live[key] = task
        heapq.heappush(self._heap, _heap_entry(task))
        if len(self._heap) > 2 * len(self._live) + self.HEAP_SLACK:
            self._rebuild_heap()
        return True

    def _rebuild_heap(self) -> None:
        """Only the live attempts, each at its current lease deadline (what `expired`
        would re-push it at)."""
        self._heap = [_heap_entry(task) for task in self._live.values()]
        heapq.heapify(self._heap)

    def heap_entries(self) -> int:
        return len(self._heap)

    def ended(self, task_id: str, token: int) -> bool:
        """A completion or failure; False when its attempt was not running (a repeat)."""
        return self._live.pop((task_id, token), None) is not None

    def expired(self, clock_ms: int) -> list[Task]:
        """Tasks whose attempt a tick ended by lease expiry or timeout, up to `clock_ms`."""
        out: list[Task] = []
        later: list[tuple[int, int, str]] = []
        heap = self._heap
        while heap and heap[0][0] <= clock_ms:
            deadline, token, task_id = heapq.heappop(heap)
            task = self._live.get((task_id, token))
            if task is None:
                continue                      # ended by a completion, failure or release
            if task.state == "running" and task.fencing_token == token:
                lease = task.lease_expires_at_ms or 0
                if lease > clock_ms:
                    later.append((lease, token, task_id))      # extended by a heartbeat
                elif clock_ms - lease <= self.ORPHAN_GRACE_MS:
                    later.append((deadline, token, task_id))   # its tick is yet to come
                else:
                    del self._live[(task_id, token)]
                continue
            del self._live[(task_id, token)]
            if _attempt_outcome(task, token) in ("lease_expired", "timed_out"):
                out.append(task)
        for entry in later:
            heapq.heappush(heap, entry)
        return out


    def given_back(self, worker_id: str) -> list[Task]:
        """Tasks whose attempt by `worker_id` an expired session just ended (statemachine/
        sessions.py): counted at once, not when their lease would have run out. O(running
        attempts), paid once per expired session."""
        out = []
        for key, task in list(self._live.items()):
            attempt = _attempt(task, key[1])
            if attempt is not None and attempt.worker_id == worker_id \
                    and attempt.outcome == "lease_expired":
                del self._live[key]
                out.append(task)
        return out


def _heap_entry(task: Task) -> tuple[int, int, str]:
    return (task.lease_expires_at_ms or 0, task.fencing_token, task.task_id)


def _attempt(task: Task, token: int) -> Attempt | None:
    for attempt in reversed(task.attempts):
        if attempt.fencing_token == token:
            return attempt
    return None


def _attempt_outcome(task: Task, token: int) -> str | None:
    attempt = _attempt(task, token)
    return None if attempt is None else attempt.outcome
