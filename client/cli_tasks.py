"""tsctl verbs for tasks and dead letters (registered on `cli`)."""
from __future__ import annotations

import json
import sys
import time
from typing import IO, Any

import click

from tsched.statemachine.limits import LIMITS, SECOND_MS

from . import render
from ._api import TERMINAL_STATES
from .cli_common import State, json_option, time_option, cli, pass_state
from .errors import ApiError

SUBMIT_BATCH_MAX = 100        # tasks per request in `submit --file`
FILE_TASKS_MAX = 1_000_000    # lines read from one --file
WAIT_POLL_S = 0.5             # `get --wait` asks this often
PROGRESS_STEPS = 1_000        # of the --wait bar: the state keeps progress in thousandths
HINT_READ_S = 3.0             # the leader's hint is worth this long a wait, no more
STATES = ["pending", "retrying", "running", "completed", "cancelled", "dead_letter",
          "discarded"]   # `retrying`: a view of pending (DESIGN 14.1)


# --- tasks --------------------------------------------------------------------------
@cli.command()
@click.argument("task_type", required=False)
@click.option("--payload", callback=json_option, help="Payload as JSON.")
@click.option("--tenant", help="Tenant (default: default).")
@click.option("--priority", type=click.IntRange(0, LIMITS.priority_max),
              help=f"0 (highest) .. {LIMITS.priority_max} (lowest).")
@click.option("--run-at", callback=time_option, help="RFC 3339 time or epoch seconds.")
@click.option("--delay", type=click.FloatRange(0, LIMITS.run_at_ahead_ms_max / SECOND_MS),
              help="Seconds from now.")
@click.option("--max-retries", type=click.IntRange(0, LIMITS.max_retries_max),
              help="Retries after the first run.")
@click.option("--idempotency-key", help="Repeat submits with this key return the same task.")
@click.option("--limit", "limits", multiple=True,
              help="A declared limit the task is claimed under (repeatable).")
@click.option("--file", "file", type=click.File("r"),
              help="Bulk submit: JSON lines, one task object each.")
@pass_state
def submit(st: State, task_type: str | None, payload: Any, tenant: str | None,
           priority: int | None, run_at: float | str | None, delay: float | None,
           max_retries: int | None, idempotency_key: str | None, limits: tuple[str, ...],
           file: IO[str] | None) -> None:
    """Submit a task (or many with --file)."""
    if file is not None:
        if task_type or payload is not None or run_at is not None or delay is not None:
            raise click.UsageError("--file takes the tasks from the file: "
                                   "no TASK_TYPE, --payload, --run-at or --delay")
        return _submit_file(st, file, tenant, priority)
    if not task_type:
        raise click.UsageError("TASK_TYPE is required (or --file)")
    if run_at is not None and delay is not None:
        raise click.UsageError("--run-at and --delay are exclusive")
    task = st.client.submit(task_type, payload, tenant=tenant, priority=priority, run_at=run_at,
                            delay_s=delay, max_retries=max_retries,
                            idempotency_key=idempotency_key, limits=list(limits) or None)
    dup = " (duplicate)" if task.get("duplicate") else ""
    st.show(task, f"{task.get('task_id')}  {task.get('state')}{dup}")
    hint = _with_leader_hint(st, task).get("unclaimed_type")
    if isinstance(hint, dict):
        click.echo(f"hint: {hint.get('message')}", err=True)


def _with_leader_hint(st: State, task: dict) -> dict:
    """`task`, with the leader's `unclaimed_type` when it is pending: no worker has asked
    for its type lately (advisory). A follower's answer leaves it out, so the leader is
    asked once, briefly; a failure to ask leaves `task` as it was."""
    if task.get("state") != "pending" or "unclaimed_type" in task or not task.get("task_id") \
            or st.client.leaderless:
        return task
    try:
        leader = st.client.get(task["task_id"], consistency="linearizable",
                               deadline_s=HINT_READ_S)
    except ApiError:
        return task
    if isinstance(leader, dict) and "unclaimed_type" in leader:
        return {**task, "unclaimed_type": leader["unclaimed_type"]}
    return task


def _read_tasks(file: IO[str], tenant: str | None, priority: int | None) -> list[dict]:
    tasks: list[dict] = []
    for lineno, line in enumerate(file, 1):
        if not line.strip():
            continue
        if len(tasks) >= FILE_TASKS_MAX:
            raise click.UsageError(f"more than {FILE_TASKS_MAX} tasks in one file")
        try:
            task = json.loads(line)
        except ValueError as exc:
            raise click.UsageError(f"line {lineno}: not JSON: {exc}") from exc
        if not isinstance(task, dict) or not isinstance(task.get("task_type"), str):
            raise click.UsageError(f"line {lineno}: a task object with task_type is needed")
        for name, value in (("tenant", tenant), ("priority", priority)):
            if value is not None:
                task.setdefault(name, value)
        tasks.append(task)
    return tasks


def _submit_file(st: State, file: IO[str], tenant: str | None, priority: int | None) -> None:
    tasks = _read_tasks(file, tenant, priority)
    done: list[dict] = []
    with click.progressbar(length=len(tasks), label="submitting", file=sys.stderr) as bar:
        for i in range(0, len(tasks), SUBMIT_BATCH_MAX):
            chunk = tasks[i:i + SUBMIT_BATCH_MAX]
            done += st.client.submit_many(chunk) or []
            bar.update(len(chunk))
    dups = sum(1 for t in done if t.get("duplicate"))
    st.show(done, f"submitted {len(done)} tasks ({dups} duplicates)")


@cli.command()
@click.argument("task_id")
@click.option("--wait", is_flag=True, help="Wait until the task is terminal.")
@click.option("--wait-timeout", type=click.FloatRange(0.1, 86400), default=300.0, show_default=True,
              help="Seconds --wait waits at most.")
@pass_state
def get(st: State, task_id: str, wait: bool, wait_timeout: float) -> None:
    """Show one task with its attempts."""
    task = st.client.get(task_id)
    if wait and task.get("state") not in TERMINAL_STATES:
        task = _wait_terminal(st, task_id, task, wait_timeout)
    task = _with_leader_hint(st, task)
    st.show(task, render.task_detail(task))


def _wait_terminal(st: State, task_id: str, task: dict, timeout_s: float) -> dict:
    """Polls until the task is terminal; the bar follows the running attempt's progress
    (DESIGN 9), its line says the state and the handler's message."""
    deadline = time.monotonic() + timeout_s
    with click.progressbar(length=PROGRESS_STEPS, label=f"waiting for {task_id}",
                           file=sys.stderr, item_show_func=_waiting_line) as bar:
        while task.get("state") not in TERMINAL_STATES:
            if time.monotonic() >= deadline:
                raise click.ClickException(f"still {task.get('state')} after {timeout_s:g} s")
            time.sleep(WAIT_POLL_S)   # the API has no task-change long-poll: poll with a deadline
            # From the asked node's replica: the first read (at the leader) set the client's
            # min_seq, so a poll never goes back in time, and a poll costs the leader nothing.
            task = st.client.get(task_id, consistency="local")
            bar.update(max(0, _steps_done(task) - bar.pos), task)
    return task


def _steps_done(task: dict) -> int:
    if task.get("state") in TERMINAL_STATES:
        return PROGRESS_STEPS
    p = task.get("progress")
    fraction = p.get("fraction") if isinstance(p, dict) else None
    return round(fraction * PROGRESS_STEPS) if isinstance(fraction, (int, float)) else 0


def _waiting_line(task: dict | None) -> str:
    if not task:
        return ""
    p = task.get("progress")
    message = p.get("message") if isinstance(p, dict) else None
    return f"{task.get('state')}: {message}" if message else str(task.get("state") or "")


@cli.command()
@click.argument("task_id")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0.1, 86400), default=300.0,
              show_default=True, help="Seconds to wait at most.")
@pass_state
def wait(st: State, task_id: str, timeout_s: float) -> None:
    """Wait until a task is terminal, with a bar of its progress; then show it."""
    task = st.client.get(task_id)
    if task.get("state") not in TERMINAL_STATES:
        task = _wait_terminal(st, task_id, task, timeout_s)
    st.show(task, render.task_detail(task))


@cli.command(name="list")
@click.option("--state", type=click.Choice(STATES))
@click.option("--tenant")
@click.option("--type", "task_type")
@click.option("--schedule", "schedule_id", help="Occurrences of this schedule id.")
@click.option("--created-after", callback=time_option,
              help="Created at or after: RFC 3339 or epoch s.")
@click.option("--created-before", callback=time_option,
              help="Created before: RFC 3339 or epoch s.")
@click.option("--finished-after", callback=time_option,
              help="Finished (completed, failed, cancelled) at or after.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@pass_state
def list_(st: State, state: str | None, tenant: str | None, task_type: str | None,
          schedule_id: str | None, created_after: float | str | None,
          created_before: float | str | None, finished_after: float | str | None,
          limit: int) -> None:
    """List tasks, newest first, following the cursor until LIMIT tasks or the end."""
    filters = {k: v for k, v in (("schedule_id", schedule_id), ("created_after", created_after),
                                 ("created_before", created_before),
                                 ("finished_after", finished_after)) if v is not None}
    tasks = list(st.client.list(limit=limit, state=state, tenant=tenant, task_type=task_type,
                                **filters))
    st.show(tasks, render.table(tasks, render.TASK_COLUMNS))


@cli.command()
@click.argument("task_id")
@pass_state
def cancel(st: State, task_id: str) -> None:
    """Cancel a task (running ones cooperatively)."""
    task = st.client.cancel(task_id)
    st.show(task, f"{task.get('task_id')}  {task.get('state')}"
                  + ("  cancel requested" if task.get("cancel_requested") else ""))


# --- dead letters -------------------------------------------------------------------
@cli.group()
def dlq() -> None:
    """Dead-lettered tasks."""


@dlq.command(name="list")
@click.option("--tenant")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@pass_state
def dlq_list(st: State, tenant: str | None, limit: int) -> None:
    """List dead-lettered tasks."""
    tasks = list(st.client.dlq_list(tenant=tenant, limit=limit))
    st.show(tasks, render.table(tasks, render.TASK_COLUMNS + [("last_error", "LAST_ERROR")]))


@dlq.command()
@click.argument("task_id")
@pass_state
def replay(st: State, task_id: str) -> None:
    """Send a dead-lettered task back to pending."""
    task = st.client.replay(task_id)
    st.show(task, f"{task.get('task_id')}  {task.get('state')}")


@dlq.command()
@click.argument("task_id")
@pass_state
def discard(st: State, task_id: str) -> None:
    """Discard a dead-lettered task (kept as `discarded` for audit until retention)."""
    task = st.client.discard(task_id)
    st.show(task, f"{task.get('task_id')}  discarded")
