"""The request table's window: which request ids a command may carry, and eviction by time.

The table (`StateMachine.requests`, request_id -> answer row) answers a repeated id with
its first answer (DESIGN 6). It must remember every id for as long as a retry of it can
arrive, so it keeps each entry for a stated window of the *state clock* rather than for a
number of later writes:

- `RequestTimes` holds when each entry was recorded (the state clock `now_ms` at the time),
  in table order, run-length encoded (the commands of one batch share one `now_ms`). The
  state clock never goes back, so the times are ascending in table order and the oldest
  entry is always the first: eviction pops from the front.
- An entry is kept at least `request_window_ms + request_ahead_ms_max` after it was
  recorded (`kept_ms`). A timed id (request_ids.py: the client's creation time `T`) is
  refused `request_expired` once `now_ms - T > request_window_ms`, and refused
  `invalid_argument` when `T - now_ms > request_ahead_ms_max`; so an admitted timed id was
  recorded at `R >= T - request_ahead_ms_max`, stays until `R + kept_ms >= T +
  request_window_ms`, and every retry of it either finds it or is refused: never applied
  twice. An untimed id (another client's key, an id the node made) is never refused by
  time; it is remembered for `kept_ms` after it was recorded, and a retry later than that
  may be applied again.
- The count bound `requests_max`: when the table is full and its oldest entry is still
  within `kept_ms`, a new recorded command is refused `tenant_limit` (changed nothing,
  recorded nothing: a retry is decided afresh) rather than forgetting an id early.
- Entries restored from a snapshot older than format 5 have no time (`UNTIMED_MS`): they
  stay until the count bound pushes them out, first in first out, as before; entries
  behind them wait for them to go.
- Work per write is bounded: each recorded write evicts at most `EVICTED_PER_WRITE`
  expired entries, more than it adds, so the table follows the write rate down.

Times are state, deterministic from the log: kept in snapshots (format 5), not hashed by
the state digest (digest.py says why).
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from .errors import INVALID_ARGUMENT, REQUEST_EXPIRED, TENANT_LIMIT
from .request_ids import request_time_ms
from .validate import Rejected

if TYPE_CHECKING:
    from .machine import StateMachine

EVICTED_PER_WRITE = 4     # expired entries one recorded write may evict
# The time of an entry restored from a format 1-4 snapshot, which recorded none: such
# entries keep the rule they were recorded under (first in, first out at the count bound,
# never by time), so a restored replica evicts exactly as its writer would have.
UNTIMED_MS = -1


class RequestTimes:
    """When each request-table entry was recorded, oldest first, as runs [ms, count]."""

    __slots__ = ("runs", "count")

    def __init__(self) -> None:
        self.runs: deque[list[int]] = deque()
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, ms: int, n: int = 1) -> None:
        runs = self.runs
        if runs and runs[-1][0] == ms:
            runs[-1][1] += n
        else:
            runs.append([ms, n])
        self.count += n

    def oldest_ms(self) -> int:
        return self.runs[0][0]

    def pop_oldest(self) -> None:
        run = self.runs[0]
        run[1] -= 1
        if run[1] == 0:
            self.runs.popleft()
        self.count -= 1

    def as_runs(self) -> list[list[int]]:
        return [[ms, n] for ms, n in self.runs]


def kept_ms(sm: StateMachine) -> int:
    return sm.limits.request_window_ms + sm.limits.request_ahead_ms_max


def admit(sm: StateMachine, request_id: str) -> None:
    """Raises `Rejected` when a recorded command under this (unrecorded) id may not run."""
    lim = sm.limits
    ms = request_time_ms(request_id)
    if ms is not None:
        age_ms = sm.now_ms - ms
        if age_ms > lim.request_window_ms:
            raise Rejected(REQUEST_EXPIRED, f"the request was made {age_ms} ms ago, more "
                           f"than the {lim.request_window_ms} ms within which a retry is "
                           "applied once: make it again as a new request",
                           request_ms=ms, now_ms=sm.now_ms, window_ms=lim.request_window_ms)
        if -age_ms > lim.request_ahead_ms_max:
            raise Rejected(INVALID_ARGUMENT, f"the Idempotency-Key's time is {-age_ms} ms "
                           f"ahead of the cluster's clock (at most "
                           f"{lim.request_ahead_ms_max}): check this client's clock",
                           field="Idempotency-Key", reason="ahead", request_ms=ms,
                           now_ms=sm.now_ms, ahead_ms_max=lim.request_ahead_ms_max)
    times = sm.request_times
    if len(sm.requests) >= lim.requests_max and times.count \
            and not _evictable(sm, times.oldest_ms()):
        raise Rejected(TENANT_LIMIT, f"the request table holds {len(sm.requests)} ids of "
                       f"the last {kept_ms(sm)} ms (at most {lim.requests_max}): try later",
                       limit="requests_max", retry_after_ms=times.oldest_ms() + kept_ms(sm)
                       - sm.now_ms + 1)


def _evictable(sm: StateMachine, recorded_ms: int) -> bool:
    """At the count bound: an untimed entry may go (FIFO), a timed one once expired."""
    return recorded_ms == UNTIMED_MS or sm.now_ms - recorded_ms > kept_ms(sm)


def remember(sm: StateMachine, request_id: str, row: tuple) -> None:
    """Records `row` under `request_id` at the state clock, then evicts: the oldest entry
    when over the count bound (only a smaller `requests_max` than the table was filled
    under gets there: `admit` refuses before), and up to `EVICTED_PER_WRITE` expired ones."""
    requests, times = sm.requests, sm.request_times
    requests[request_id] = row
    times.add(sm.now_ms)
    if len(requests) > sm.limits.requests_max:
        requests.popitem(last=False)
        times.pop_oldest()
    oldest_kept_ms = sm.now_ms - kept_ms(sm)
    for _ in range(EVICTED_PER_WRITE):
        ms = times.oldest_ms()
        if ms >= oldest_kept_ms or ms == UNTIMED_MS:
            break
        requests.popitem(last=False)
        times.pop_oldest()
