"""`tsctl archive search`: the audit archive (DESIGN 14.3). With `--dir` it reads an
archive directory (a node's, or a copy of it) directly; without, it asks `GET /v1/archive`
of the first node of --url that answers and follows its cursor to the end."""
from __future__ import annotations

import datetime as _dt
import json
import re
from typing import cast

import click

from tsched.statemachine.archive_format import DAY_MS, day_start_ms, last_by_task_id

from . import render
from .archive import Query
from .errors import ApiError
from .archive import search as run_search
from .cli_common import State, cli

ARCHIVE_COLUMNS = [("task_id", "TASK_ID"), ("task_type", "TYPE"), ("tenant", "TENANT"),
                   ("state", "STATE"), ("attempt", "ATTEMPT"), ("completed_at", "COMPLETED"),
                   ("last_error", "LAST_ERROR")]
PAGE_SIZE = 1_000
ENABLE_HINT = ("To archive, remove `enabled = false` from `[archive]` in cluster.toml on "
               "every node (without it each node archives under its data_dir) and restart "
               "them one by one; tasks evicted from then on are archived "
               "(docs/operations.md, Audit)")
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def archive_time(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """RFC 3339 with an offset, epoch seconds or YYYY-MM-DD (checked; kept as given)."""
    if value is None:
        return None
    try:
        if _DAY.match(value):
            day_start_ms(value)
        else:
            float(value)
        return value
    except ValueError:
        pass
    try:
        when = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise click.BadParameter("give RFC 3339 with an offset (2026-12-01T15:00:00Z), "
                                 "epoch seconds or YYYY-MM-DD")
    return value


def _ms(value: str | None, end_of_day: bool = False) -> int | None:
    """archive_time's value as epoch ms (a day: its start, or with end_of_day its end)."""
    if value is None:
        return None
    if _DAY.match(value):
        return day_start_ms(value) + (DAY_MS if end_of_day else 0)
    try:
        return int(float(value) * 1000)
    except ValueError:
        return int(_dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


@cli.group()
def archive() -> None:
    """The audit archive of evicted tasks."""


@archive.command()
@click.option("--dir", "directory", type=click.Path(exists=True, file_okay=False, readable=True),
              help="An archive directory ([archive] dir under a node's data_dir) to read "
                   "directly; without it, GET /v1/archive of the node.")
@click.option("--task-id")
@click.option("--tenant")
@click.option("--type", "task_type")
@click.option("--from", "from_", callback=archive_time,
              help="completed_at at or after: RFC 3339, epoch seconds or YYYY-MM-DD.")
@click.option("--to", callback=archive_time,
              help="completed_at before: RFC 3339, epoch s, or YYYY-MM-DD (to its end).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one archived task each.")
@click.pass_context
def search(ctx: click.Context, directory: str | None, task_id: str | None, tenant: str | None,
           task_type: str | None, from_: str | None, to: str | None, as_json: bool) -> None:
    """Find archived tasks (evicted after their retention).

    Without --dir it asks the first node that answers (GET /v1/archive, admin token) and
    takes exactly one of --task-id and --tenant (--type, --from and --to narrow it). With
    --dir it reads an archive directory, a node's or a copy, with any of the filters. A
    node archives unless its cluster.toml says [archive] enabled = false
    (docs/operations.md).
    A corrupt or truncated file is reported and skipped."""
    as_json = as_json or bool(ctx.find_root().params.get("as_json"))
    if directory is not None:
        found = run_search(directory, Query(task_id=task_id, tenant=tenant,
                                            task_type=task_type, from_ms=_ms(from_),
                                            to_ms=_ms(to, end_of_day=True)))
        records, skipped = found.records, [{"file": f, "reason": r} for f, r in found.skipped]
    else:
        if (task_id is None) == (tenant is None):
            raise click.UsageError("a search on a node (without --dir) takes exactly one of "
                                   "--task-id and --tenant")
        # the root command (cli_common.cli) always sets the State
        records, skipped = _from_node(cast(State, ctx.find_object(State)), task_id, tenant,
                                      from_, to)
        records = [r for r in records if task_type is None or r["task"].get("task_type")
                   == task_type]
    for item in skipped:
        click.echo(f"skipped {item['file']}: {item['reason']}", err=True)
    if as_json:
        for record in records:
            click.echo(json.dumps(record, separators=(",", ":")))
    else:
        click.echo(render.table([r["task"] for r in records], ARCHIVE_COLUMNS))


def _from_node(state: State, task_id: str | None, tenant: str | None, from_: str | None,
               to: str | None) -> tuple[list[dict], list[dict]]:
    """Every page of GET /v1/archive, repeats dropped by task id (the last wins)."""
    by_id: dict[str, dict] = {}
    skipped: list[dict] = []
    cursor = None
    while True:
        try:
            page = state.client.archive_page(task_id=task_id, tenant=tenant, from_=from_,
                                             to=to, limit=PAGE_SIZE, cursor=cursor)
        except ApiError as exc:
            if exc.code == "archive_not_configured":
                raise ApiError(exc.code, f"{exc.message}. {ENABLE_HINT}", exc.details,
                               exc.status) from None
            raise
        last_by_task_id(page.get("records") or [], by_id)
        skipped += page.get("skipped") or []
        cursor = page.get("next_cursor")
        if not cursor:
            return list(by_id.values()), skipped
