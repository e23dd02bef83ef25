"""An example tasks module: two tasks and a periodic one. Run its worker next to `tsctl dev`:

    cd examples && ../.venv/bin/tsworker tasks --concurrency 4

Task names default to `module.function` (here `tasks.send_email`): a producer must import
this module under the same name (run it from this folder too), or give `name=`.
"""
from __future__ import annotations

import os
import time

from tsched.client import App, NonRetryable, TaskContext

# Seconds first: every 30 s. The test suite sets TICK_CRON to fire every second.
TICK_CRON = os.environ.get("TICK_CRON", "*/30 * * * * *")

# The nodes of TSCTL_URL (and TSCTL_TOKEN, TSCTL_CA_FILE) as tsctl, else `tsctl dev`'s.
app = App()


@app.task(priority=3, max_retries=5, retry_on=(ConnectionError,))
def send_email(to: str, subject: str = "hello") -> dict[str, str]:
    """The return value (JSON) becomes the task's result."""
    if "@" not in to:
        raise NonRetryable(f"not an address: {to!r}")   # dead-letters at once
    time.sleep(0.05)                                      # the real work
    return {"sent_to": to, "subject": subject}


@app.task
def add(a: int, b: int) -> int:
    return a + b


@app.periodic(TICK_CRON, id="examples-tick", overlap="skip")
def tick(ctx: TaskContext) -> str:
    """Fired by the schedule; `ctx` is the run's context (never passed by a caller)."""
    print(f"tick {ctx.task_id} due {ctx.run_at:%H:%M:%S}", flush=True)
    return f"ticked at {ctx.run_at}"
