"""tsctl verbs for paused queues (issue 48): `tsctl pause`, `tsctl resume`, `tsctl queues`."""
from __future__ import annotations

import click

from tsched.statemachine.limits import LIMITS

from . import render
from .cli_common import State, cli, pass_state


def _selector(task_type: str | None, tenant: str | None) -> None:
    if task_type is None and tenant is None:
        raise click.UsageError("give --type, --tenant, or both")


@cli.command()
@click.option("--type", "task_type", help="Pause this task type (every tenant's, unless "
              "--tenant).")
@click.option("--tenant", help="Pause this tenant's tasks (of every type, unless --type).")
@click.option("--reason", help=f"Shown with the pause (at most "
              f"{LIMITS.pause_reason_chars_max} characters).")
@pass_state
def pause(st: State, task_type: str | None, tenant: str | None, reason: str | None) -> None:
    """Stop claims of a task type, a tenant, or both, until `tsctl resume`: their tasks
    stay pending and their schedules keep firing; running tasks finish."""
    _selector(task_type, tenant)
    if reason is not None and len(reason) > LIMITS.pause_reason_chars_max:
        raise click.UsageError(f"--reason is longer than {LIMITS.pause_reason_chars_max} "
                               "characters")
    out = st.client.pause_queue(task_type=task_type, tenant=tenant, reason=reason)
    note = "" if out.get("changed", True) else " (it was paused already)"
    st.show(out, f"paused {render.paused(out)}{note}")


@cli.command()
@click.option("--type", "task_type", help="The paused task type.")
@click.option("--tenant", help="The paused tenant.")
@pass_state
def resume(st: State, task_type: str | None, tenant: str | None) -> None:
    """Lift a pause (name it exactly as it was paused): its tasks run again."""
    _selector(task_type, tenant)
    out = st.client.resume_queue(task_type=task_type, tenant=tenant)
    st.show(out, f"resumed {render.paused(out)}")


@cli.command()
@pass_state
def queues(st: State) -> None:
    """List the paused queues: selector, since when, by whom and why."""
    items = st.client.list_pauses() or []
    st.show(items, render.pauses_table(items))
