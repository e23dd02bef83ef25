"""The task types workers have asked for lately, as the leader saw their claims: advisory,
in memory, not replicated (issue: a task type no worker serves is accepted and waits).

The leader serves every claim (a follower forwards its claims there), so its record is the
whole cluster's. `GET /v1/tasks/{id}` of a pending task asks it (`unclaimed`): no worker
has asked for the task's type within WINDOW_S -> a hint in the answer. The record answers
only for the term it has watched for a whole window (a new leader has seen no claims yet),
and says it cannot tell when it had to forget a type seen within the window (at most
TYPES_MAX types are kept, the least recently asked for forgotten first). Times are the
caller's monotonic seconds."""
from __future__ import annotations

WINDOW_S = 120.0       # a worker's long poll lasts at most 60 s (Limits.claim_wait_ms_max)
TYPES_MAX = 10_000     # task types remembered; the least recently asked for go first


class ClaimedTypes:
    def __init__(self, window_s: float = WINDOW_S, types_max: int = TYPES_MAX) -> None:
        self.window_s = window_s
        self._types_max = types_max
        self._last: dict[str, float] = {}    # task type -> last asked; oldest first
        self._term: int | None = None        # the leader's term this record watches
        self._since = 0.0                    # when it began watching that term
        self._forgot_at = float("-inf")      # the latest time a forgotten type was asked

    def watch(self, term: int, now_s: float) -> None:
        """Watch `term` (this node leads in it); another term starts the record afresh."""
        if term != self._term:
            self._last.clear()
            self._term, self._since = term, now_s
            self._forgot_at = float("-inf")

    def note(self, task_types: tuple[str, ...], term: int, now_s: float) -> None:
        """A claim for `task_types` reached this node as the leader of `term`."""
        self.watch(term, now_s)
        last = self._last
        for task_type in task_types:
            last.pop(task_type, None)        # re-inserted last: the dict stays oldest first
            last[task_type] = now_s
        while len(last) > self._types_max:
            oldest = next(iter(last))
            self._forgot_at = max(self._forgot_at, last.pop(oldest))

    def unclaimed(self, task_type: str, term: int, now_s: float) -> bool | None:
        """True: no worker asked for `task_type` within the window; False: one did; None:
        this record cannot tell (a new term, watched for less than a window, or a type
        that may have been forgotten)."""
        self.watch(term, now_s)
        horizon = now_s - self.window_s
        if self._since > horizon:
            return None
        seen = self._last.get(task_type)
        if seen is not None:
            return seen <= horizon
        return None if self._forgot_at > horizon else True

    def __len__(self) -> int:
        return len(self._last)
