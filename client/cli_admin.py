"""tsctl verbs for schedules, tenants, the cluster and `dev` (registered on `cli`)."""
from __future__ import annotations

import click

from . import render
from .cli_common import State, json_option, cli, pass_state
from .dev import DevError, run_dev


@cli.group()
def schedules():
    """Cron schedules."""


@schedules.command(name="list")
@click.option("--tenant")
@pass_state
def schedules_list(st: State, tenant):
    """List schedules."""
    items = list(st.client.list_schedules(tenant=tenant))
    st.show(items, render.table(items, render.SCHEDULE_COLUMNS))


@schedules.command()
@click.argument("schedule_id")
@click.option("--cron", required=True, help="Cron expression (5 or 6 fields, @daily...).")
@click.option("--tz", "timezone", help="IANA time zone (default UTC).")
@click.option("--task-type", required=True)
@click.option("--payload", callback=json_option, help="Payload as JSON.")
@click.option("--tenant")
@pass_state
def put(st: State, schedule_id, cron, timezone, task_type, payload, tenant):
    """Create or replace a schedule."""
    sched = st.client.put_schedule(schedule_id, cron, task_type, payload, timezone=timezone,
                                   tenant=tenant)
    st.show(sched, render.schedule_detail(sched))


def _schedule_verb(name: str, method: str, doc: str):
    @schedules.command(name=name, help=doc)
    @click.argument("schedule_id")
    @click.option("--tenant")
    @pass_state
    def verb(st: State, schedule_id, tenant):
        sched = getattr(st.client, method)(schedule_id, tenant=tenant)
        st.show(sched, render.schedule_detail(sched))
    verb.__name__ = f"schedules_{name}"
    return verb


schedules_get = _schedule_verb("get", "get_schedule", "Show a schedule and its recent fires.")
schedules_pause = _schedule_verb("pause", "pause_schedule", "Pause a schedule.")
schedules_resume = _schedule_verb("resume", "resume_schedule", "Resume a paused schedule.")
schedules_trigger = _schedule_verb("trigger", "trigger_schedule", "Fire a schedule now.")
schedules_delete = _schedule_verb("delete", "delete_schedule", "Delete a schedule.")


@schedules.command()
@click.argument("expr")
@click.option("--tz", "timezone", help="IANA time zone (default UTC).")
@click.option("--count", type=click.IntRange(1, 100), default=5, show_default=True)
@pass_state
def preview(st: State, expr, timezone, count):
    """Show the next fire times of a cron expression."""
    fires = st.client.cron_preview(expr, timezone=timezone, count=count) or []
    st.show({"fires": fires}, "\n".join(fires))


@cli.group()
def tenants():
    """Tenants: running caps and weights."""


@tenants.command(name="list")
@pass_state
def tenants_list(st: State):
    """List tenants with running/pending counts."""
    items = st.client.list_tenants() or []
    st.show(items, render.table(items, render.TENANT_COLUMNS))


@tenants.command(name="set")
@click.argument("tenant")
@click.option("--max-running", type=click.IntRange(0, 1_000_000), help="0 = unlimited.")
@click.option("--weight", type=click.IntRange(1, 1_000_000))
@pass_state
def tenants_set(st: State, tenant, max_running, weight):
    """Set a tenant's running cap and/or fair-share weight."""
    if max_running is None and weight is None:
        raise click.UsageError("give --max-running and/or --weight")
    view = st.client.set_tenant(tenant, max_running=max_running, weight=weight)
    st.show(view, render.fields(view))


@cli.group()
def cluster():
    """Cluster status and leadership."""


@cluster.command()
@pass_state
def status(st: State):
    """Nodes, roles, leader and term."""
    info = st.client.cluster_status()
    by_shard = None
    if info.get("shards"):   # how the tasks spread over the shards
        by_shard = (st.client.stats() or {}).get("by_shard")
    st.show(info, render.cluster_detail(info, by_shard))


@cluster.command()
@click.option("--to", "to", help="Node id (default: any other node).")
@pass_state
def transfer(st: State, to):
    """Ask the leader to hand leadership over."""
    answer = st.client.transfer_leadership(to)
    st.show(answer, "leadership transfer requested" + (f" to {to}" if to else ""))


@cli.command()
@click.option("--config", "config", type=click.Path(dir_okay=False),
              help="Cluster file (default: ./cluster.toml or the repository root's).")
@click.option("--shards", type=click.IntRange(1, 64), default=None,
              help="Run the file's nodes with this many shards (data in folders of their own).")
def dev(config, shards):
    """Run every node of the cluster file here until Ctrl-C."""
    try:
        code = run_dev(config, click.echo, shards)
    except DevError as exc:
        raise click.ClickException(str(exc)) from exc
    raise SystemExit(code)
