"""The tasks of docs/from-celery.md, each shown there beside its Celery form. Serve them with

    cd examples && ../.venv/bin/tsworker celery_guide --concurrency 8

and run the guide's snippets from this folder (they `import celery_guide`, so the task
types, `celery_guide.add` and so on, are the worker's).
"""
from __future__ import annotations

import time

from tsched.client import App, RateLimited, RetryLater, TaskContext

# Celery("proj", broker=..., backend=...): the nodes of TSCTL_URL (else `tsctl dev`'s);
# they are the broker, the result backend and beat at once.
app = App()


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(max_retries=3)                      # bind=True: ask for `ctx` instead of self
def fetch_report(day: str, ctx: TaskContext) -> dict:
    if ctx.attempt < 2:                       # self.request.retries + 1
        raise RetryLater(after_s=1)           # self.retry(countdown=1)
    return {"day": day, "attempt": ctx.attempt}


@app.task(retry_on=(ConnectionError,), max_retries=5,        # autoretry_for=(...)
          retry={"backoff": "exponential", "base_s": 0.5, "max_s": 600, "jitter": 1.0})
def sync_account(account: str, ctx: TaskContext) -> str:
    if account == "unknown":
        raise KeyError(account)               # not in retry_on: dead-lettered at once
    if ctx.attempt == 1:
        raise ConnectionError("partner down")  # retried after the backoff
    return f"{account} synced on attempt {ctx.attempt}"


@app.task(timeout_s=60)                       # time_limit=60: never leased past 60 s
def export(rows: int, ctx: TaskContext) -> dict:
    for done in range(rows):
        if ctx.cancelled.is_set():            # cancelled, timed out or lease lost: stop
            return {"rows": done, "stopped": True}
        time.sleep(0.01)                      # one row's work
    return {"rows": rows, "execution_id": ctx.execution_id,
            "fencing_token": ctx.fencing_token}


# rate_limit="100/m" limits each worker process; these limits hold for all workers at once.
app.limit("partner-api", rate=100, per_s=60)
app.limit("per-account", concurrency=1, partition_by="kwargs.account")


@app.task(limits=["partner-api", "per-account"])
def charge(*, account: str, cents: int, ctx: TaskContext) -> str:
    if partner_refuses(ctx):                  # the partner answered 429: no one calls it
        raise RateLimited("partner-api", after_s=1)   # for 1 s; this run is not counted
    return f"charged {cents} to {account}"


_refused: set[str] = set()


def partner_refuses(ctx: TaskContext) -> bool:
    """A stand-in for the partner's API: it refuses each charge's first call (a 429)."""
    first = ctx.execution_id not in _refused
    _refused.add(ctx.execution_id)
    return first


@app.periodic("0 2 * * *", timezone="Europe/Berlin", id="nightly-report")   # celery beat
def nightly_report(ctx: TaskContext) -> str:
    return f"report for the night of {ctx.run_at:%Y-%m-%d}"


@app.task
def tsum(values: list[int]) -> int:           # a chord's callback: the header's results
    return sum(values)


@app.task
def interest(account: int) -> int:
    return account % 7


@app.task
def close_ledger(ctx: TaskContext) -> int:    # a batch's callback: no arguments,
    return sum(ctx.parents.values())          # ctx.parents: step name -> result
