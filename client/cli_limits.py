"""tsctl verbs for keyed limits (issue 46): `tsctl limits put|list|get|delete`."""
from __future__ import annotations

import click

from tsched.statemachine.limits import LIMITS, SECOND_MS

from . import render
from .cli_common import State, cli, pass_state

PER_S_MAX = LIMITS.limit_per_ms_max // SECOND_MS


@cli.group()
def limits() -> None:
    """Keyed rate and concurrency limits, enforced when a task is claimed."""


@limits.command(name="list")
@pass_state
def limits_list(st: State) -> None:
    """List limits with their use now."""
    items = st.client.list_limits() or []
    st.show(items, render.table(items, render.LIMIT_COLUMNS))


@limits.command(name="put")
@click.argument("name")
@click.option("--rate", type=click.IntRange(1, LIMITS.limit_rate_max),
              help="At most this many claims in any window of --per seconds.")
@click.option("--per", "per_s", type=click.FloatRange(0.001, PER_S_MAX),
              help="The rate's window in seconds (default 1).")
@click.option("--concurrency", type=click.IntRange(1, LIMITS.limit_concurrency_max),
              help="At most this many of its tasks running at once.")
@click.option("--partition-by", help="`tenant`, or a top-level payload field: a budget per "
              "value.")
@pass_state
def limits_put(st: State, name: str, rate: int | None, per_s: float | None,
               concurrency: int | None, partition_by: str | None) -> None:
    """Declare or change a limit."""
    if rate is None and concurrency is None:
        raise click.UsageError("give --rate (and --per) and/or --concurrency")
    if per_s is not None and rate is None:
        raise click.UsageError("--per needs --rate")
    out = st.client.put_limit(name, rate=rate, per_s=per_s, concurrency=concurrency,
                              partition_by=partition_by)
    st.show(out, render.limit_detail(out))


@limits.command(name="get")
@click.argument("name")
@pass_state
def limits_get(st: State, name: str) -> None:
    """Show a limit, its use and its busiest partitions."""
    out = st.client.get_limit(name)
    st.show(out, render.limit_detail(out))


@limits.command(name="delete")
@click.argument("name")
@pass_state
def limits_delete(st: State, name: str) -> None:
    """Delete a limit: its held tasks go back to the queue, unbound by it."""
    out = st.client.delete_limit(name)
    st.show(out, render.limit_detail(out))
