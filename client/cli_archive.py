"""`tsctl archive search`: the audit archive's files, read directly (DESIGN 14.3). No node
is asked: an operator points it at a node's archive directory (or a copy of it)."""
from __future__ import annotations

import datetime as _dt
import json

import click

from . import render
from .archive import Query
from .archive import search as run_search
from .cli_common import cli, time_option

ARCHIVE_COLUMNS = [("task_id", "TASK_ID"), ("task_type", "TYPE"), ("tenant", "TENANT"),
                   ("state", "STATE"), ("attempt", "ATTEMPT"), ("completed_at", "COMPLETED"),
                   ("last_error", "LAST_ERROR")]


def _ms(value) -> int | None:
    """time_option's value (epoch seconds or RFC 3339 text) as epoch ms."""
    if value is None:
        return None
    if isinstance(value, float):
        return int(value * 1000)
    return int(_dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


@cli.group()
def archive():
    """The audit archive of evicted tasks."""


@archive.command()
@click.option("--dir", "directory", required=True,
              type=click.Path(exists=True, file_okay=False, readable=True),
              help="An archive directory ([archive] dir under a node's data_dir).")
@click.option("--task-id")
@click.option("--tenant")
@click.option("--type", "task_type")
@click.option("--from", "from_", callback=time_option,
              help="completed_at at or after: RFC 3339 or epoch seconds.")
@click.option("--to", callback=time_option, help="completed_at before: RFC 3339 or epoch s.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one archived task each.")
@click.pass_context
def search(ctx, directory, task_id, tenant, task_type, from_, to, as_json):
    """Find archived tasks. A corrupt or truncated file is reported and skipped."""
    as_json = as_json or bool(ctx.find_root().params.get("as_json"))
    found = run_search(directory, Query(task_id=task_id, tenant=tenant, task_type=task_type,
                                        from_ms=_ms(from_), to_ms=_ms(to)))
    for name, reason in found.skipped:
        click.echo(f"skipped {name}: {reason}", err=True)
    tasks = [r["task"] for r in found.records]
    if as_json:
        for record in found.records:
            click.echo(json.dumps(record, separators=(",", ":")))
    else:
        click.echo(render.table(tasks, ARCHIVE_COLUMNS))
