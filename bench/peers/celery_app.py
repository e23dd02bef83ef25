"""The Celery application used by bench/peers/celery_redis.py (imported by its worker).

The broker and result backend are the benchmark's own redis-server, named by the
TSCHED_BENCH_REDIS_URL environment variable that the benchmark sets for its worker.
Settings mirror tsched's semantics as closely as Celery allows: a task is acknowledged
only after it ran (acks_late, like a lease), and its result is stored (like `complete`).
"""
from __future__ import annotations

import os
import time

import redis
from celery import Celery

REDIS_URL = os.environ.get("TSCHED_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
DONE_KEY = "bench:done"
LATENESS_KEY = "bench:lateness_ms"

app = Celery("tsched_bench", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_acks_late=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    result_expires=3600,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    # Held ETA tasks must stay invisible to other consumers for the whole benchmark.
    broker_transport_options={"visibility_timeout": 3600},
)

_conn: redis.Redis | None = None


def _redis() -> redis.Redis:
    """One connection per worker process (prefork children each make their own)."""
    global _conn
    if _conn is None:
        _conn = redis.Redis.from_url(REDIS_URL)
    return _conn


@app.task(name="bench.noop")
def noop(i: int) -> dict:
    _redis().incr(DONE_KEY)
    return {}


@app.task(name="bench.timed")
def timed(run_at_ms: float) -> None:
    # The handler's start is the figure: read the clock before anything else.
    started_ms = time.time() * 1000.0
    _redis().rpush(LATENESS_KEY, f"{started_ms - run_at_ms:.3f}")
