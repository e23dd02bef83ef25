"""The worker runtime: claim, run handlers, heartbeat, report.

One asyncio loop does all the talking (long-poll claims, batched heartbeats, batched
completions); sync handlers run in a thread pool, async handlers on the loop. A due task of
a sync handler goes from the claim to its thread and from there to the outbox through
plain callbacks, without a coroutine of its own (`_run_on_thread`). The worker
holds at least `concurrency + claim_ahead` tasks (default 4 x concurrency, like Celery's
prefetch) so that a claim's round trip overlaps running handlers; with fast handlers it
holds more, up to `held_max`, and keeps several claims open (`_window.py`), so that it is
limited by the cluster or its handlers rather than by round trips; under a backlog the
window follows what the handlers do while they have work, growing at most 4x per full
claim. While claims come back full, finished outcomes ride on the next claim
(`completions` of `POST /v1/claims`: one request and one Raft entry for both; such a claim
waits for no work) or, when no claim goes out soon, on a `POST /v1/completions` of their
own, as they always do under a trickle of work.

Every claim and heartbeat batch carries the worker's slots (`concurrency` in all, the busy
ones by task type: `Claiming.slots`), which the leader turns into the autoscaling gauge
`tsched_worker_slots` (DESIGN 14.4); heartbeats go at least every 20 s, and first to the
node a claim answer named leader. A handler's `ctx.progress(fraction, message)` is sent
with a heartbeat of its own, the latest report per task at most once a second
(`_progress.py`, DESIGN 9).

With `reserve=` (DESIGN 5.1) the Worker runs as lanes (`_reserve.py`), each a Worker of
its own slots, window and threads: a reserved lane claims only its tier's range, the rest
the whole range; stopping the Worker stops every lane.

Stopping (`stop()`, SIGTERM or SIGINT; a second one skips the grace period): the worker
stops claiming, gives back at once the tasks whose handlers have not started yet
(early-dispatched ones waiting for `run_at`), lets running handlers finish within
`grace_s`, and then *releases* the leases of those still running (back to `pending` without using up a retry; if the node has no release
call, they are failed as retryable instead). Their `ctx.cancelled` is set and any late
result is dropped.
"""
from __future__ import annotations

from ._worker import Worker

__all__ = ["Worker"]

if __name__ == "__main__":   # `python -m tsched.client.worker` is `tsworker` (tsworker.py)
    from .tsworker import main
    main()
