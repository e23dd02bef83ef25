"""`tsctl audit`: the audit trail of operator actions (DESIGN 14.6), newest first."""
from __future__ import annotations

import json

import click

from tsched.statemachine.limits import API_LIMITS, LIMITS

from . import render
from .cli_common import State, cli, pass_state, time_option

AUDIT_COLUMNS = [("at", "AT"), ("actor", "ACTOR"), ("action", "ACTION"), ("target", "TARGET"),
                 ("change", "CHANGE")]
AUDIT_LIMIT_MAX = 100_000     # entries one command prints (a shard keeps at most 100,000)


@cli.command()
@click.option("--since", callback=time_option, help="Entries at or after: RFC 3339 or epoch s.")
@click.option("--actor", type=click.STRING, help="admin, tenant:NAME or anonymous.")
@click.option("--action", help="e.g. task.cancel, schedule.put, tenant.set.")
@click.option("--target", help="A task id, TENANT/SCHEDULE_ID, a tenant or a node id.")
@click.option("--limit", type=click.IntRange(1, AUDIT_LIMIT_MAX), default=100, show_default=True,
              help="At most this many entries.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one entry each.")
@pass_state
def audit(st: State, since: float | str | None, actor: str | None, action: str | None,
          target: str | None, limit: int, as_json: bool) -> None:
    """Who cancelled, replayed, discarded or changed what: newest first."""
    for name, value, bound in (("actor", actor, LIMITS.audit_actor_chars_max),
                               ("action", action, API_LIMITS.audit_action_chars_max),
                               ("target", target, API_LIMITS.audit_target_chars_max)):
        if value is not None and not 1 <= len(value) <= bound:
            raise click.BadParameter(f"1..{bound} characters", param_hint=f"--{name}")
    entries = list(st.client.audit(limit=limit, since=since, actor=actor, action=action,
                                   target=target))
    if as_json or st.as_json:
        for entry in entries:
            click.echo(json.dumps(entry, separators=(",", ":"), sort_keys=True))
    else:
        click.echo(render.table(entries, AUDIT_COLUMNS))
