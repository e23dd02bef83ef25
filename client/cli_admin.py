"""tsctl verbs for schedules, tenants, the cluster and `dev` (registered on `cli`)."""
from __future__ import annotations

import os
from typing import Any

import click

from tsched.statemachine.limits import API_LIMITS, LIMITS

from . import render
from .cli_common import State, json_option, cli, pass_state, time_option
from .cron_check import CronError, check_cron, check_zone
from .dev import DevError, run_dev

# The API's bounds on a schedule's policies (node/api/schedules.py), checked before sending.
CATCHUP_WINDOW_S_MAX = 7 * 86_400
JITTER_S_MAX = 3_600
OVERLAPS = ["allow", "skip", "buffer_one"]
MISFIRES = ["run_all", "run_once", "skip"]


@cli.group()
def schedules() -> None:
    """Cron schedules."""


@schedules.command(name="list")
@click.option("--tenant")
@pass_state
def schedules_list(st: State, tenant: str | None) -> None:
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
@click.option("--overlap", type=click.Choice(OVERLAPS),
              help="A fire while the last one runs: allow (default), skip, buffer_one.")
@click.option("--misfire", type=click.Choice(MISFIRES),
              help="Fires missed without a leader: run_all (default), run_once, skip.")
@click.option("--catchup-window", "catchup_window_s",
              type=click.FloatRange(0, CATCHUP_WINDOW_S_MAX),
              help="Seconds a missed fire may be late and still run (default 60).")
@click.option("--priority", type=click.IntRange(0, 10), help="Of each fire's task: 0 (highest) "
              ".. 10 (lowest).")
@click.option("--jitter", "jitter_s", type=click.FloatRange(0, JITTER_S_MAX),
              help="Up to this many seconds added to each fire (default 0).")
@click.option("--start-at", callback=time_option, help="No fire before: RFC 3339 or epoch s.")
@click.option("--end-at", callback=time_option, help="No fire after: RFC 3339 or epoch s.")
@pass_state
def put(st: State, schedule_id: str, cron: str, timezone: str | None, task_type: str,
        payload: Any, tenant: str | None, **policies: float | str | None) -> None:
    """Create or replace a schedule."""
    check_cron_option(cron, timezone, "--cron")
    sched = st.client.put_schedule(schedule_id, cron, task_type, payload, timezone=timezone,
                                   tenant=tenant, **policies)
    st.show(sched, render.schedule_detail(sched))


def check_cron_option(expr: str, timezone: str | None, hint: str) -> None:
    """The expression and zone checked here, before a request: the error names the field."""
    try:
        check_cron(expr)
    except CronError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None
    if timezone is not None:
        try:
            check_zone(timezone)
        except CronError as exc:
            raise click.BadParameter(str(exc), param_hint="--tz") from None


def _schedule_verb(name: str, method: str, doc: str) -> click.Command:
    @schedules.command(name=name, help=doc)
    @click.argument("schedule_id")
    @click.option("--tenant")
    @pass_state
    def verb(st: State, schedule_id: str, tenant: str | None) -> None:
        sched = getattr(st.client, method)(schedule_id, tenant=tenant)
        st.show(sched, render.schedule_detail(sched))
    # `verb` is a click Command by now, which declares no __name__: set as any attribute.
    setattr(verb, "__name__", f"schedules_{name}")
    return verb


schedules_get = _schedule_verb("get", "get_schedule", "Show a schedule and its recent fires.")
schedules_pause = _schedule_verb("pause", "pause_schedule", "Pause a schedule.")
schedules_resume = _schedule_verb("resume", "resume_schedule", "Resume a paused schedule.")
schedules_trigger = _schedule_verb("trigger", "trigger_schedule", "Fire a schedule now.")
schedules_delete = _schedule_verb("delete", "delete_schedule", "Delete a schedule.")


@schedules.command()
@click.argument("expr")
@click.option("--tz", "timezone", help="IANA time zone (default UTC).")
@click.option("--count", type=click.IntRange(1, API_LIMITS.cron_preview_fires_max), default=5, show_default=True)
@pass_state
def preview(st: State, expr: str, timezone: str | None, count: int) -> None:
    """Show the next fire times of a cron expression."""
    check_cron_option(expr, timezone, "EXPR")
    fires = st.client.cron_preview(expr, timezone=timezone, count=count) or []
    st.show({"fires": fires}, "\n".join(fires))


@cli.group()
def tenants() -> None:
    """Tenants: running caps and weights."""


@tenants.command(name="list")
@pass_state
def tenants_list(st: State) -> None:
    """List tenants with running/pending counts."""
    items = st.client.list_tenants() or []
    st.show(items, render.table([render.tenant_view(t) for t in items], render.TENANT_COLUMNS))


@tenants.command(name="set")
@click.argument("tenant")
@click.option("--max-running", type=click.IntRange(0, LIMITS.tenant_running_max),
              help="0 = unlimited.")
@click.option("--weight", type=click.IntRange(1, LIMITS.tenant_weight_max))
@pass_state
def tenants_set(st: State, tenant: str, max_running: int | None, weight: int | None) -> None:
    """Set a tenant's running cap and/or fair-share weight."""
    if max_running is None and weight is None:
        raise click.UsageError("give --max-running and/or --weight")
    view = st.client.set_tenant(tenant, max_running=max_running, weight=weight)
    st.show(view, render.fields(render.tenant_view(view)))


@cli.group()
def cluster() -> None:
    """Cluster status, leadership and members."""


@cluster.command()
@pass_state
def status(st: State) -> None:
    """Nodes, roles, leader and term."""
    info = st.client.cluster_status()
    by_shard = None
    if info.get("shards"):   # how the tasks spread over the shards
        by_shard = (st.client.stats() or {}).get("by_shard")
    st.show(info, render.cluster_detail(info, by_shard))


@cluster.command()
@click.option("--to", "to", help="Node id (default: any other node).")
@pass_state
def transfer(st: State, to: str | None) -> None:
    """Ask the leader to hand leadership over."""
    answer = st.client.transfer_leadership(to)
    st.show(answer, "leadership transfer requested" + (f" to {to}" if to else ""))


MEMBER_COLUMNS = [("id", "ID"), ("raft", "RAFT"), ("http", "HTTP"), ("leader", "LEADER")]


def _show_members(st: State, answer: dict, headline: str) -> None:
    leader = answer.get("leader")
    rows = [{**m, "leader": "*" if m["id"] == leader else ""} for m in answer["members"]]
    st.show(answer, headline + render.table(rows, MEMBER_COLUMNS))


@cluster.command()
@pass_state
def members(st: State) -> None:
    """The cluster's members (id, Raft and HTTP addresses)."""
    _show_members(st, st.client.members(), "")


@cluster.command(name="add-node")
@click.argument("node_id")
@click.option("--raft", "raft", required=True, help="The new node's Raft address, host:port.")
@click.option("--http", "http", required=True, help="Its HTTP API address, host:port.")
@pass_state
def add_node(st: State, node_id: str, raft: str, http: str) -> None:
    """Add a member (then start it with `tsnode --join`). One change at a time."""
    _show_members(st, st.client.add_member(node_id, raft, http), f"added {node_id}\n")


@cluster.command(name="remove-node")
@click.argument("node_id")
@pass_state
def remove_node(st: State, node_id: str) -> None:
    """Remove a member (a leader hands over first); then stop that node for good."""
    _show_members(st, st.client.remove_member(node_id), f"removed {node_id}\n")


@cli.command()
@click.option("--config", "config", type=click.Path(dir_okay=False),
              help="Cluster file (default: ./cluster.toml or the repository root's).")
@click.option("--shards", type=click.IntRange(1, 64), default=None,
              help="Run the file's nodes with this many shards (data in folders of their own).")
def dev(config: str | None, shards: int | None) -> None:
    """Run every node of the cluster file here until Ctrl-C."""
    try:
        code = run_dev(config, click.echo, shards)
    except DevError as exc:
        raise click.ClickException(str(exc)) from exc
    raise SystemExit(code)


@cli.command(name="backup")
@click.argument("path", metavar="FILE", type=click.Path(dir_okay=False, writable=True))
@pass_state
def backup_cmd(st: State, path: str) -> None:
    """Write a consistent backup of every shard to FILE (admin token)."""
    from .backup import take_backup
    head = take_backup(st.urls, st.token, path, ca_file=st.ca_file, timeout_s=st.timeout_s)
    size = os.path.getsize(path)   # the sections, the head before them and the checksum
    text = (f"backup of cluster {head['cluster']} ({head['shards']} shard(s)) written to "
            f"{path} ({size} bytes): " + ", ".join(
                f"shard {s['shard']} at log index {s['raft_index']} (a snapshot of "
                f"{s['bytes']} bytes)" for s in head["sections"]))
    st.show({**head, "file_bytes": size}, text)
