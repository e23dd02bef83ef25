"""An example worker. Run it next to `tsctl dev`:

    .venv/bin/python examples/worker.py

It runs `send_email` tasks, four at a time, until Ctrl-C (running tasks get up to 30 s to
finish; the rest are released back to the cluster).
"""
import logging
import os
import time

from tsched.client import NonRetryable, Worker

URLS = os.environ.get(
    "TSCTL_URL", "http://127.0.0.1:8701,http://127.0.0.1:8702,http://127.0.0.1:8703")


def send_email(payload, ctx):
    """`payload` is the task's JSON payload; the return value becomes the task's result."""
    if not isinstance(payload, dict) or "to" not in payload:
        raise NonRetryable("payload needs a 'to' address")   # dead-letters at once
    print(f"task {ctx.task_id} attempt {ctx.attempt}: emailing {payload['to']}", flush=True)
    time.sleep(0.1)                  # the real work; check ctx.cancelled in long loops
    if ctx.cancelled.is_set():
        raise RuntimeError("cancelled")   # any other exception is retried with backoff
    return {"sent_to": payload["to"]}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)   # one line per request is too much
    Worker(URLS, handlers={"send_email": send_email}, concurrency=4).run()
