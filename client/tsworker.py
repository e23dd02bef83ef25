"""`tsworker MODULE[:APP]`: run a Worker for an App's decorated tasks (like `celery -A`,
`dramatiq module`, `rq worker`). Also `python -m tsched.client.worker`.

It imports MODULE (the current directory is on the path), finds the App (the attribute
APP, else `app`, else the module's only App), puts the app's periodic schedules
(idempotently, schedule_sync.py), logs one line naming the tasks and schedules it serves,
and runs until SIGTERM or SIGINT (the Worker's graceful stop).

Exit status: 0 after a clean stop, 1 an API error, 2 a usage error (module or app not
found, unknown task), 3 no node answered.
"""
from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from types import ModuleType
from typing import Any

import click

from ._core import CA_FILE_ENV, TOKEN_ENV, URL_ENV
from .app import App, AsyncApp
from .app_task import AnyTask, Periodic
from .client import Client
from .errors import ApiError, Unavailable
from .limit_sync import sync_limits
from .schedule_sync import sync_schedules
from ._claiming import check_priorities
from ._reserve import Lane, Reserve, check_reserve, describe, split_slots
from ._session import SESSION_TIMEOUT_S
from ._worker import Worker

log = logging.getLogger("tsched.tsworker")
TASK_TYPES_MAX = 32          # the API's bound on the task types of one claim
EXIT_API_ERROR, EXIT_UNAVAILABLE = 1, 3
AnyApp = App | AsyncApp


def _import(module_name: str) -> ModuleType:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())   # `tsworker tasks` finds ./tasks.py, as python -m does
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise click.UsageError(f"cannot import {module_name!r}: {exc}") from None


def find_app(spec: str) -> AnyApp:
    """The App that MODULE[:APP] names; a click.UsageError (exit 2) when there is none."""
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise click.UsageError("give MODULE or MODULE:APP")
    module = _import(module_name)
    if attr:
        found = getattr(module, attr, None)
        if not isinstance(found, (App, AsyncApp)):
            raise click.UsageError(f"{module_name} has no App named {attr!r}")
        return found
    named = getattr(module, "app", None)
    if isinstance(named, (App, AsyncApp)):
        return named
    apps = sorted(k for k, v in vars(module).items() if isinstance(v, (App, AsyncApp)))
    if len(apps) != 1:
        which = f"several ({', '.join(apps)})" if apps else "none"
        raise click.UsageError(f"{module_name}: looking for one App, found {which}; "
                               f"name it as {module_name}:APP")
    found = getattr(module, apps[0])
    assert isinstance(found, (App, AsyncApp))
    return found


def served_tasks(app: AnyApp, names: str | None) -> list[AnyTask]:
    if not app.tasks:
        raise click.UsageError("the app declares no tasks")
    if names is None:
        return list(app.tasks.values())
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in app.tasks]
    if unknown or not wanted:
        raise click.UsageError(f"unknown task {', '.join(unknown) or '(none given)'}; "
                               f"the app has: {', '.join(sorted(app.tasks))}")
    return [app.tasks[n] for n in wanted]


def put_schedules(app: AnyApp, served: list[AnyTask], prune: bool) -> list[Periodic]:
    """The app's keyed limits first (its tasks name them), then its schedules."""
    names = {t.name for t in served}
    periodics = [p for p in app.periodics.values() if p.task_type in names]
    if not periodics and not prune and not app.limits:
        return []
    with Client(app.urls, token=app.token, timeout_s=app.timeout_s,
                ca_file=app.ca_file) as client:
        sync_limits(client, app.limits)
        if periodics or prune:
            sync_schedules(client, periodics, app.periodics, prune=prune, tenant=app.tenant)
    return periodics


def _startup_line(served: list[AnyTask], periodics: list[Periodic], concurrency: int,
                  urls: list[str]) -> str:
    tasks = ", ".join(t.name for t in served)
    scheds = ", ".join(f"{p.schedule_id} ({p.cron}, {p.timezone})" for p in periodics)
    return (f"tsworker serving {len(served)} tasks [{tasks}], {len(periodics)} schedules "
            f"[{scheds}], concurrency {concurrency}, nodes {','.join(urls)}")


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)   # one line per request is too much


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("app_spec", metavar="MODULE[:APP]")
@click.option("--tasks", "task_names", help="Serve only these tasks (comma-separated names).")
@click.option("--concurrency", type=click.IntRange(1, 1024), default=4, show_default=True,
              help="Tasks run at once (threads for sync tasks).")
@click.option("--url", envvar=URL_ENV, help=f"Node URLs, comma-separated ({URL_ENV}); "
              "default: the App's.")
@click.option("--token", envvar=TOKEN_ENV, help=f"Bearer token ({TOKEN_ENV}); default: "
              "the App's.")
@click.option("--ca-file", envvar=CA_FILE_ENV, type=click.Path(exists=True, dir_okay=False),
              help=f"CA bundle to verify https:// nodes ({CA_FILE_ENV}); default: the App's.")
@click.option("--grace", "grace_s", type=click.FloatRange(0, 3600), default=30.0,
              show_default=True, help="Seconds running tasks get to finish after SIGTERM.")
@click.option("--prune-schedules", is_flag=True,
              help="Delete the schedules of the app's tenant that the app does not declare.")
@click.option("--priorities", "priorities", metavar="LO-HI",
              help="Claim only tasks whose effective priority is in LO..HI (e.g. 0-3); "
                   "default: the app's `priorities`, else all.")
@click.option("--reserve", "reserve", metavar="TIER=SHARE", multiple=True,
              help="Reserve ceil(SHARE x concurrency) slots (at least one) that claim only "
                   "TIER's priorities, e.g. low=10% or low=0.1; repeatable or comma-separated "
                   "(default tiers: critical, high, normal, low, batch); default: the "
                   "app's `reserve`, else none.")
@click.option("--session-timeout", "session_timeout_s", type=float, default=SESSION_TIMEOUT_S,
              show_default=True, metavar="S",
              help="Seconds without a word from this worker after which the cluster gives "
                   "its tasks back (1-60; 0: no session, they wait for their leases).")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
              default="INFO", show_default=True)
def cli(app_spec: str, task_names: str | None, concurrency: int, url: str | None,
        token: str | None, ca_file: str | None, grace_s: float, prune_schedules: bool,
        priorities: str | None, reserve: tuple[str, ...], session_timeout_s: float,
        log_level: str) -> None:
    """Run a worker for the tasks of the App in MODULE (e.g. `tsworker myproject.tasks`).

    Puts the app's periodic schedules first (an unchanged one is left as it is), then
    claims and runs its tasks until SIGTERM or Ctrl-C: running tasks get --grace seconds
    to finish, the rest go back to the cluster."""
    _configure_logging(log_level)
    app = find_app(app_spec)
    try:
        app.configure(urls=url, token=token, ca_file=ca_file)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from None
    try:
        prio = check_priorities(priorities) if priorities is not None else app.priorities
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--priorities") from None
    if session_timeout_s != 0 and not 1 <= session_timeout_s <= 60:
        raise click.BadParameter("must be 0 (no session) or 1..60", param_hint="--session-timeout")
    shares, lanes = _lanes(concurrency, reserve, app, prio)
    served = served_tasks(app, task_names)
    if len(served) > TASK_TYPES_MAX:
        raise click.UsageError(f"a worker claims at most {TASK_TYPES_MAX} task types, the app "
                               f"has {len(served)}: split them with --tasks")
    periodics = _put_or_exit(app, served, prune_schedules)
    worker = Worker(app.urls, {t.name: t.handler() for t in served}, concurrency=concurrency,
                    token=app.token, grace_s=grace_s, timeout_s=app.timeout_s,
                    ca_file=app.ca_file, priorities=prio, reserve=shares,
                    session_timeout_s=session_timeout_s or None)
    # Graceful from the startup line on: a supervisor may send SIGTERM as soon as it reads
    # it, before the Worker's loop has installed its own handlers (which replace these).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _sig, _frame: worker.stop())
    log.info("%s", _startup_line(served, periodics, concurrency, app.urls)
             + (f", reserved slots: {describe(lanes)}" if lanes else ""))
    worker.run()
    log.info("tsworker stopped: every claimed task finished or given back")


def _lanes(concurrency: int, reserve: tuple[str, ...], app: AnyApp,
           prio: tuple[int, int] | None) -> tuple[Reserve, list[Lane]]:
    """--reserve (else the app's) and the lanes it makes, checked before any request."""
    try:
        shares = check_reserve(list(reserve)) if reserve else app.reserve
        return shares, split_slots(concurrency, shares, prio) if shares else []
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--reserve") from None


def _put_or_exit(app: AnyApp, served: list[AnyTask], prune: bool) -> list[Periodic]:
    try:
        return put_schedules(app, served, prune)
    except Unavailable as exc:
        click.echo(f"error: unavailable: {exc.message}", err=True)
        raise SystemExit(EXIT_UNAVAILABLE) from None
    except ApiError as exc:
        click.echo(f"error: limits or schedules: {exc.code}: {exc.message}", err=True)
        raise SystemExit(EXIT_API_ERROR) from None


def main(argv: list[str] | None = None) -> Any:
    return cli.main(args=argv, prog_name="tsworker")


if __name__ == "__main__":
    sys.exit(main())
