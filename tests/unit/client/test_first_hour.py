"""What a newcomer meets before any node answers: `--json` after every verb, a URL that
names the API path, unreachable nodes (a hint, and no wait for the whole --timeout), cron
mistakes named by field and schedule, the App taking TSCTL_URL / TSCTL_TOKEN /
TSCTL_CA_FILE, `tsctl dev`'s banner and `tsctl archive search --help`."""
from __future__ import annotations

import time
from pathlib import Path

import certifi
import click
import pytest
from click.testing import CliRunner

from tsched.client import App, AsyncApp
from tsched.client._core import _no_route
from tsched.client.cli import cli
from tsched.client.cron_check import CronError, check_cron
from tsched.client.dev import DevNode, banner
from tsched.client.tsworker import cli as tsworker_cli

try:
    from client_support import dead_url
except ImportError:  # collected as a package
    from tests.unit.client.client_support import dead_url

CA_FILE = certifi.where()   # a CA bundle (httpx's own)


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _leaves(group: click.Group, path: tuple[str, ...] = ()):
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from _leaves(cmd, (*path, name))
        else:
            yield (*path, name), cmd


LEAVES = list(_leaves(cli))


@pytest.mark.parametrize("path,cmd", LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_every_verb_takes_json_after_it(path, cmd):
    assert "--json" in {o for p in cmd.params for o in getattr(p, "opts", ())}, path
    assert "--json" in run(*path, "--help").output


def test_json_after_the_verb_is_parsed_as_before_it():
    url = dead_url()
    after = run("--url", url, "--timeout", "0.5", "list", "--json")
    before = run("--url", url, "--timeout", "0.5", "--json", "list")
    assert after.exit_code == before.exit_code == 3, after.output   # no usage error (2)


@pytest.mark.parametrize("url,base", [
    ("http://127.0.0.1:8701/v1", "http://127.0.0.1:8701"),
    ("http://127.0.0.1:8701/v1/", "http://127.0.0.1:8701"),
    ("https://sched.example/tsched/v1/tasks", "https://sched.example/tsched"),
])
def test_a_url_naming_the_api_path_is_refused_with_the_base_url(url, base, monkeypatch):
    result = run("--url", url, "list")
    assert result.exit_code == 2
    assert repr(base) in result.output and "TSCTL_URL" in result.output
    monkeypatch.setenv("TSCTL_URL", url)
    assert run("list").exit_code == 2
    with pytest.raises(ValueError, match="base URL"):
        App(url)


def test_unreachable_nodes_answer_soon_with_a_hint():
    started = time.monotonic()
    result = run("--url", f"{dead_url()},{dead_url()}", "--timeout", "60", "list")
    assert result.exit_code == 3
    assert time.monotonic() - started < 20      # not the whole --timeout of 60 s
    assert "TSCTL_URL or --url" in result.output and "nothing listens" in result.output


def test_a_host_that_does_not_resolve_is_named():
    result = run("--url", "http://tsched-no-such-host.invalid:8701", "--timeout", "60", "list")
    assert result.exit_code == 3
    assert "does not resolve" in result.output and "TSCTL_URL" in result.output


@pytest.mark.parametrize("expr,field", [
    ("61 * * * *", "minute"), ("0 24 * * *", "hour"), ("0 0 32 * *", "day of month"),
    ("0 0 * 13 *", "month"), ("0 0 * * 8", "day of week"), ("61 * * * * *", "second"),
    ("*/0 * * * *", "minute"),
])
def test_a_bad_cron_field_is_named(expr, field):
    with pytest.raises(CronError, match=f"the {field} field"):
        check_cron(expr)
    result = run("--url", dead_url(), "schedules", "put", "s", "--cron", expr,
                 "--task-type", "t")
    assert result.exit_code == 2 and f"the {field} field" in result.output
    result = run("--url", dead_url(), "schedules", "preview", expr)
    assert result.exit_code == 2 and f"the {field} field" in result.output


@pytest.mark.parametrize("expr", ["* * * * *", "*/30 * * * * *", "@daily", "H 2 * * *",
                                  "0 0 L * *", "0 0 15W * *", "0 9 * * MON-FRI",
                                  "0 0 * * 5#3", "0 0 30 2 *", "0 0 * * 7"])
def test_what_the_cluster_takes_passes(expr):
    check_cron(expr)


@pytest.mark.parametrize("expr,words", [("* * *", "3 fields"), ("@often", "unknown cron macro"),
                                        ("", "empty")])
def test_other_cron_mistakes(expr, words):
    with pytest.raises(CronError, match=words):
        check_cron(expr)


def test_an_unknown_zone_is_refused_before_a_request():
    result = run("--url", dead_url(), "schedules", "put", "s", "--cron", "0 2 * * *",
                 "--tz", "Mars/Olympus", "--task-type", "t")
    assert result.exit_code == 2 and "unknown time zone" in result.output


@pytest.mark.parametrize("kind", [App, AsyncApp])
def test_periodic_refuses_a_bad_cron_at_decoration_naming_the_schedule(kind):
    app = kind(dead_url())
    with pytest.raises(CronError, match=r"schedule 'nightly'.*the minute field '61'"):
        @app.periodic("61 * * * *", id="nightly")
        def nightly() -> None: ...
    with pytest.raises(CronError, match="unknown time zone"):
        @app.periodic("0 2 * * *", timezone="Berlin")
        def daily() -> None: ...
    assert app.periodics == {}


def test_app_takes_url_token_and_ca_file_from_the_environment(monkeypatch):
    url = dead_url()
    monkeypatch.setenv("TSCTL_URL", f"{url},{url}/")
    monkeypatch.setenv("TSCTL_TOKEN", "tok")
    monkeypatch.setenv("TSCTL_CA_FILE", CA_FILE)
    app = App()
    assert (app.urls, app.token, app.ca_file) == ([url, url], "tok", CA_FILE)
    assert app.client.token == "tok"
    explicit = App("http://127.0.0.1:1", token="mine", ca_file=None)
    assert (explicit.urls, explicit.token) == (["http://127.0.0.1:1"], "mine")


def test_app_without_environment_uses_the_local_cluster(monkeypatch):
    for name in ("TSCTL_URL", "TSCTL_TOKEN", "TSCTL_CA_FILE"):
        monkeypatch.delenv(name, raising=False)
    app = App()
    assert app.urls == [f"http://127.0.0.1:{p}" for p in (8701, 8702, 8703)]
    assert app.token is None and app.ca_file is None


def test_tsworker_takes_a_ca_file(tmp_path, monkeypatch):
    (tmp_path / "cafile_tasks.py").write_text(
        "from tsched.client import App\napp = App('http://127.0.0.1:1')\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(tsworker_cli, ["cafile_tasks", "--ca-file", "/nonexistent"])
    assert result.exit_code == 2 and "--ca-file" in result.output


def test_dev_names_each_node_by_the_url_tsctl_takes():
    nodes = [DevNode("n1", "127.0.0.1:8701"), DevNode("n2", "127.0.0.1:8702")]
    lines = banner(Path("cluster.toml"), "n1", None, nodes, Path(".tsched/logs"))
    assert "  n1: http://127.0.0.1:8701   dashboard http://127.0.0.1:8701/" in lines
    assert not any("/v1" in line for line in lines)
    assert "  export TSCTL_URL=http://127.0.0.1:8701,http://127.0.0.1:8702" in lines


def test_archive_search_help_states_its_rule():
    text = " ".join(run("archive", "search", "--help").output.split())
    assert "exactly one of --task-id and --tenant" in text and "[archive]" in text
    result = run("--url", dead_url(), "archive", "search")
    assert result.exit_code == 2 and "exactly one of --task-id and --tenant" in result.output


def test_each_shards_replicas_show_their_digest_and_lag():
    from tsched.client.render import cluster_detail
    replicas = [{"id": "n1", "role": "leader", "commit_index": 40, "applied_seq": 30,
                 "digest": "a" * 64, "reachable": True},
                {"id": "n2", "role": "follower", "commit_index": 38, "applied_seq": 27,
                 "digest": "b" * 64, "reachable": True}]
    text = cluster_detail({"leader": "n1", "term": 2, "nodes": [],
                           "shards": [{"shard": 0, "leader": "n1", "term": 2,
                                       "nodes": replicas}]})
    table = text.split("\n\n")[-1].splitlines()
    head = table[0].split()
    assert head[-4:] == ["APPLIED_SEQ", "LAG", "DIGEST", "REACHABLE"]
    rows = {r.split()[1]: r.split() for r in table[1:]}
    assert rows["n1"][head.index("DIGEST")] == "a" * 12 and rows["n1"][head.index("LAG")] == "0"
    assert rows["n2"][head.index("LAG")] == "3"


def test_a_no_route_404_is_known_by_its_reason_before_its_message():
    assert _no_route("Not Found", {"status": 404, "reason": "no_route"})
    assert _no_route("anything", {"status": 404, "reason": "no_route"})
    # A node's 404 with another reason is about a resource, whatever its message.
    assert not _no_route("Not Found", {"status": 404, "reason": "no_asset"})
    assert not _no_route("task 0f is not known", {"task_id": "0f"})
    # A node from before details.reason: aiohttp's own message and status.
    assert _no_route("Not Found", {"status": 404})
    assert not _no_route("Not Found", None)
