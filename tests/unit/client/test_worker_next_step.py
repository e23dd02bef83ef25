"""The Worker's log line after a failure says what follows, from the cluster's minimal answer:
a retry with its delay in seconds (the answer's `next_retry_at`), or the dead-letter queue.
A real Worker against the in-process API (a single replica)."""
from __future__ import annotations

import asyncio
import logging
import re

from tsched.client import NonRetryable, Worker

from tests.api_support import Api, until

RETRY_30S = {"backoff": "fixed", "base_s": 30, "max_s": 30, "jitter": 0}


def _worker_log(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "tsched.worker")


async def test_a_failure_is_followed_by_retry_k_of_n_in_n_s_or_dead_lettered(api: Api, tt, caplog):
    caplog.set_level(logging.INFO, logger="tsched.worker")
    boom_type, refuse_type = f"{tt}-boom", f"{tt}-refuse"
    boom = await api.submit(task_type=boom_type, max_retries=2, retry=RETRY_30S)
    refuse = await api.submit(task_type=refuse_type, max_retries=3)

    def fail(payload, ctx):
        raise RuntimeError("boom")

    def refuse_it(payload, ctx):
        raise NonRetryable("bad input")
    worker = Worker([str(api.client.make_url("")).rstrip("/")],
                    {boom_type: fail, refuse_type: refuse_it}, wait_s=1)
    running = asyncio.create_task(worker.run_async())
    try:
        await until(lambda: f"task {boom['task_id']}: retry" in _worker_log(caplog)
                    and f"task {refuse['task_id']}: dead-lettered" in _worker_log(caplog),
                    "the worker's log of both failures' next steps")
    finally:
        worker.stop()
        await asyncio.wait_for(running, 30)
    text = _worker_log(caplog)
    retry = re.search(rf"task {boom['task_id']}: retry 1 of 2 in (\S+) s$", text, re.M)
    assert retry, text
    assert 29 <= float(retry.group(1)) <= 30          # the fixed backoff, less the round trip
    assert f"task {refuse['task_id']}: dead-lettered after attempt 1 of 4: not retryable" in text
    status, shown = await api.call("GET", f"/v1/tasks/{boom['task_id']}")
    assert status == 200 and shown["status"] == "retrying" and shown["attempt"] == 1
