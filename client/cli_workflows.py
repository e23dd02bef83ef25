"""tsctl verbs for workflows (registered on `cli`): `tsctl workflows list|get|cancel`."""
from __future__ import annotations

import click

from . import render
from .cli_common import State, cli, pass_state

WORKFLOW_STATES = ["running", "completed", "failed", "cancelled"]
WORKFLOW_COLUMNS = [("workflow_id", "WORKFLOW_ID"), ("tenant", "TENANT"), ("state", "STATE"),
                    ("step_count", "STEPS"), ("created_at", "CREATED"),
                    ("finished_at", "FINISHED")]
STEP_COLUMNS = [("name", "STEP"), ("state", "STATE"), ("task_id", "TASK_ID"),
                ("deps", "DEPS"), ("on_parent_failure", "ON_FAILURE"), ("error", "ERROR")]


@cli.group()
def workflows() -> None:
    """Workflows: graphs of steps submitted at once."""


@workflows.command(name="list")
@click.option("--state", type=click.Choice(WORKFLOW_STATES))
@click.option("--tenant")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@pass_state
def list_(st: State, state: str | None, tenant: str | None, limit: int) -> None:
    """List workflows, newest first."""
    items = list(st.client.list_workflows(tenant=tenant, state=state, limit=limit))
    st.show(items, render.table(items, WORKFLOW_COLUMNS))


@workflows.command()
@click.argument("workflow_id")
@pass_state
def get(st: State, workflow_id: str) -> None:
    """Show a workflow: its state, counts by state, and each step."""
    wf = st.client.get_workflow(workflow_id)
    counts = "  ".join(f"{k}={n}" for k, n in sorted((wf.get("counts") or {}).items()))
    head = {k: v for k, v in wf.items() if k not in ("steps", "counts")}
    steps = [{**s, "deps": ",".join(s.get("deps") or [])} for s in wf.get("steps") or []]
    st.show(wf, f"{render.fields(head)}\ncounts  {counts}\n\n"
                f"{render.table(steps, STEP_COLUMNS)}")


@workflows.command()
@click.argument("workflow_id")
@pass_state
def cancel(st: State, workflow_id: str) -> None:
    """Cancel a workflow: waiting and pending steps cancelled, running ones asked to stop."""
    wf = st.client.cancel_workflow(workflow_id)
    st.show(wf, f"{wf.get('workflow_id')}  {wf.get('state')}")
