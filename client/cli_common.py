"""tsctl's root group, shared state, option parsers and exit codes (DESIGN.md section 8).

Exit status: 0 success, 1 an API error (its code printed), 2 a usage error, 3 no node answered.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from typing import Any

import click

from ._core import CA_FILE_ENV, DEFAULT_URLS, TOKEN_ENV, URL_ENV, Call, parse_urls
from .client import Client
from .errors import ApiError, Unavailable

EXIT_API_ERROR, EXIT_UNAVAILABLE = 1, 3
# A call gives up this soon when no node accepts a connection at all (a wrong URL, a
# stopped cluster), instead of retrying for the whole --timeout in silence.
UNREACHABLE_S = 3.0
# A read waits this long for the leader's answer before it reads a node's own replica: an
# operator in an outage still sees the state, a few seconds late and told so.
LEADER_READ_S = 3.0
CONSISTENCY_ENV = "TSCTL_CONSISTENCY"
JSON_HELP = "Print JSON instead of tables."


def _json_after_verb(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """`tsctl VERB --json` means `tsctl --json VERB` (the root made the State first)."""
    state = ctx.find_object(State)
    if value and state is not None:
        state.as_json = True
    return value


class TsctlCommand(click.Command):
    """A tsctl verb: takes `--json` after the verb too, as every verb does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not any(p.name == "as_json" for p in self.params):
            self.params.append(click.Option(["--json", "as_json"], is_flag=True,
                                            expose_value=False, callback=_json_after_verb,
                                            help=JSON_HELP))


class TsctlGroup(click.Group):
    """Turns API errors into exit codes for every subcommand; its verbs and groups are
    tsctl's own (`--json` after the verb)."""

    command_class = TsctlCommand
    group_class = type     # subgroups are TsctlGroups too

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Unavailable as exc:
            click.echo(f"error: unavailable: {exc.message}", err=True)
            ctx.exit(EXIT_UNAVAILABLE)
        except ApiError as exc:
            click.echo(f"error: {exc.code}: {exc.message}", err=True)
            ctx.exit(EXIT_API_ERROR)


class CliClient(Client):
    """tsctl's client. Its reads of replicated state are answered by the leader
    (`consistency=linearizable`), so a read sees every write acknowledged before it, such
    as one an earlier tsctl made through another node, which this node may not have applied
    yet. When no leader answers within LEADER_READ_S the read goes to a node's own replica,
    with a note on stderr, and so do the invocation's later reads (`leaderless`).
    `consistency="local"` (`--consistency local`): every read is the asked node's."""

    def __init__(self, *args: Any, consistency: str = "linearizable", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.local = consistency == "local"
        self.leaderless = False

    def _send(self, call: Call) -> Any:
        if call.write or not call.replica_read or "consistency" in call.params \
                or self.local or self.leaderless:
            return super()._send(call)
        at_leader = dataclasses.replace(
            call, params={**call.params, "consistency": "linearizable"},
            deadline_s=min(LEADER_READ_S, call.deadline_s or self.timeout_s))
        try:
            return super()._send(at_leader)
        except Unavailable as exc:
            self.leaderless = True
            click.echo(f"note: no leader answered ({exc.message}); reading a node's own "
                       "replica, which may lag", err=True)
            return super()._send(call)


class State:
    def __init__(self, urls: list[str], token: str | None, as_json: bool, timeout_s: float,
                 ca_file: str | None = None, consistency: str = "linearizable"):
        self.urls, self.token, self.as_json, self.timeout_s = urls, token, as_json, timeout_s
        self.ca_file, self.consistency = ca_file, consistency
        self._client: CliClient | None = None

    @property
    def client(self) -> CliClient:
        if self._client is None:
            self._client = CliClient(self.urls, token=self.token, timeout_s=self.timeout_s,
                                     ca_file=self.ca_file, consistency=self.consistency,
                                     unreachable_s=min(UNREACHABLE_S, self.timeout_s))
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def show(self, obj: Any, text: str) -> None:
        click.echo(json.dumps(obj, indent=2, sort_keys=True) if self.as_json else text)


pass_state = click.make_pass_decorator(State)


# --- option parsers -----------------------------------------------------------------
def urls_option(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    try:
        return parse_urls(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


def json_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}") from exc


def time_option(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """RFC 3339 with an offset, or epoch seconds."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter("give RFC 3339 (2026-12-01T15:00:00Z) or epoch seconds") from exc
    if when.tzinfo is None:
        raise click.BadParameter("give a UTC offset (Z or +hh:mm)")
    return value


@click.group(cls=TsctlGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar=URL_ENV, default=DEFAULT_URLS, show_default=True,
              callback=urls_option, help=f"Node base URLs, comma-separated ({URL_ENV}).")
@click.option("--token", envvar=TOKEN_ENV, default=None, help=f"Bearer token ({TOKEN_ENV}).")
@click.option("--ca-file", envvar=CA_FILE_ENV, default=None,
              type=click.Path(exists=True, dir_okay=False),
              help=f"CA bundle to verify https:// nodes ({CA_FILE_ENV}).")
@click.option("--json", "as_json", is_flag=True,
              help=JSON_HELP + " Also accepted after the verb.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0.1, 600), default=15.0,
              show_default=True, help="Seconds to keep trying the nodes (while no node "
              f"accepts a connection at all: {UNREACHABLE_S:g} s).")
@click.option("--consistency", envvar=CONSISTENCY_ENV,
              type=click.Choice(["linearizable", "local"]), default="linearizable",
              show_default=True,
              help="Reads: answered by the leader, so they see every acknowledged write "
              f"(a node's own replica when no leader answers within {LEADER_READ_S:g} s, "
              "with a note on stderr), or `local`: by the node asked, which may lag "
              f"({CONSISTENCY_ENV}).")
@click.pass_context
def cli(ctx: click.Context, url: list[str], token: str | None, ca_file: str | None,
        as_json: bool, timeout_s: float, consistency: str) -> None:
    """tsched admin CLI."""
    ctx.obj = State(url, token, as_json, timeout_s, ca_file, consistency)
    ctx.call_on_close(ctx.obj.close)
