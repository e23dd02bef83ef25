"""tsworker: usage errors exit 2 (module, app or task not found) before any request; the
schedules it puts at start are idempotent (an unchanged one is not rewritten, a changed one
is replaced with a log line and keeps an operator's pause), and only --prune-schedules
deletes schedules the app does not declare."""
from __future__ import annotations

import itertools
import logging
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tsched.client import App
from tsched.client.tsworker import cli, find_app, put_schedules, served_tasks

from tests.unit.client.client_support import FakeNode, dead_url, error

_names = itertools.count()
TASKS_MODULE = """
from tsched.client import App
app = App("{url}")

@app.task(name="hello")
def hello(who: str) -> str:
    return "hello " + who
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """Writes a module into a temp folder made the current directory; returns its name."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    made = []

    def write(source: str) -> str:
        name = f"proj_tasks_{next(_names)}"
        (tmp_path / f"{name}.py").write_text(source)
        made.append(name)
        return name
    yield write
    for name in made:
        sys.modules.pop(name, None)


def tsworker(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_help_describes_the_command():
    result = tsworker("--help")
    assert result.exit_code == 0
    for word in ("MODULE[:APP]", "--concurrency", "--tasks", "--prune-schedules", "SIGTERM"):
        assert word in result.output


@pytest.mark.parametrize("source, spec, message", [
    (None, "no_such_module_here", "cannot import 'no_such_module_here'"),
    ("x = 1\n", "{m}", "looking for one App, found none"),
    ("x = 1\n", "{m}:app", "has no App named 'app'"),
    (TASKS_MODULE + "other = App('{url}')\n", "{m}:nope", "has no App named 'nope'"),
    ("from tsched.client import App\na = App('{url}')\nb = App('{url}')\n", "{m}",
     "found several (a, b)"),
    ("import no_such_dependency_here\n", "{m}", "No module named 'no_such_dependency_here'"),
    (TASKS_MODULE, "{m} --tasks nope", "unknown task nope; the app has: hello"),
    ("from tsched.client import App\napp = App('{url}')\n", "{m}", "declares no tasks"),
    (TASKS_MODULE, "{m} --concurrency 0", "--concurrency"),
    (TASKS_MODULE, "{m} --url ftp://x", "not an http(s) URL"),
    (TASKS_MODULE, "{m} --priorities 5-2", "--priorities"),
    (TASKS_MODULE, "{m} --priorities x", "--priorities"),
    (TASKS_MODULE, "{m} --reserve slow=10%", "--reserve"),
    (TASKS_MODULE, "{m} --concurrency 2 --reserve low=10% --reserve high=10%", "--reserve"),
    (TASKS_MODULE, "{m} --reserve low=100%", "--reserve"),
    (TASKS_MODULE, "{m} --priorities 0-3 --reserve low=0.1", "--reserve"),
    (TASKS_MODULE, "{m} --session-timeout 0.5", "--session-timeout"),
    (TASKS_MODULE, "{m} --session-timeout 61", "--session-timeout"),
], ids=["no module", "no app", "no attribute", "not named", "two apps", "import fails",
        "unknown task", "no tasks", "concurrency", "bad url", "range backwards", "range text",
        "reserve tier", "reserve all slots", "reserve share", "reserve outside range",
        "session under a second", "session over a minute"])
def test_usage_errors_exit_2_before_any_request(project, source, spec, message):
    url = dead_url()
    name = project(source.format(url=url)) if source else "unused"
    result = tsworker(*spec.format(m=name).split())
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_python_m_tsched_client_worker_is_tsworker(tmp_path):
    """Run as `__main__`, worker.py must not be imported already by its package (runpy's
    RuntimeWarning, an error here)."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-W", "error", "-m", "tsched.client.worker",
                               *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    helped = run("--help")
    assert helped.returncode == 0 and "MODULE[:APP]" in helped.stdout, helped.stderr
    missing = run("no_such_module_here")
    assert missing.returncode == 2 and "cannot import" in missing.stderr, missing.stderr


def test_the_app_is_found_by_name_or_as_the_only_one(project):
    url = dead_url()
    named = project(TASKS_MODULE.format(url=url))
    assert set(find_app(named).tasks) == {"hello"}
    only = project(TASKS_MODULE.replace("app", "mine").format(url=url))
    assert set(find_app(only).tasks) == {"hello"}
    assert find_app(f"{only}:mine") is find_app(only)


def test_no_node_answering_the_schedule_put_exits_3(project):
    name = project(TASKS_MODULE.format(url=dead_url()) + """
@app.periodic("* * * * * *", id="tick")
def tick() -> None:
    pass
""")
    app = find_app(name)
    app.timeout_s = 0.3
    result = tsworker(name)
    assert result.exit_code == 3 and "unavailable" in result.output


# --- schedules put at start ------------------------------------------------------------------

STORED = {"schedule_id": "tick", "tenant": "default", "cron": "*/5 * * * * *",
          "timezone": "Europe/Berlin", "overlap": "skip", "misfire": "run_all",
          "catchup_window_s": 60, "paused": False, "start_at": None, "end_at": None,
          "jitter_s": 0, "next_fire_at": "2026-12-01T10:00:05Z", "fires": [],
          "task": {"task_type": "tick", "payload": {"args": [], "kwargs": {}}, "priority": 2,
                   "timeout_s": 300, "max_retries": 3,
                   "retry": {"backoff": "exponential", "base_s": 1, "max_s": 300,
                             "multiplier": 2, "jitter": 0.1}},
          "created_at": "2026-12-01T09:00:00Z", "updated_at": "2026-12-01T09:00:00Z"}


@pytest.fixture
def node():
    n = FakeNode()
    yield n
    n.close()


def periodic_app(url: str, cron: str = "*/5  * * * * *") -> App:
    app = App(url, timeout_s=2)

    @app.periodic(cron, id="tick", name="tick", overlap="skip", timezone="Europe/Berlin",
                  priority=2)
    def tick() -> None:
        pass
    return app


def test_an_unchanged_schedule_is_not_rewritten(node, caplog):
    node.json("GET", "/v1/schedules/tick", 200, STORED)
    app = periodic_app(node.url)
    with caplog.at_level(logging.INFO, logger="tsched.tsworker"):
        put_schedules(app, list(app.tasks.values()), prune=False)
    assert node.requests("PUT", "/v1/schedules/tick") == []
    assert "schedule tick unchanged" in caplog.text


def test_a_changed_schedule_is_updated_with_a_log_line_and_stays_paused(node, caplog):
    node.json("GET", "/v1/schedules/tick", 200, {**STORED, "paused": True})
    node.json("PUT", "/v1/schedules/tick", 200, STORED)
    app = periodic_app(node.url, cron="*/10 * * * * *")
    with caplog.at_level(logging.INFO, logger="tsched.tsworker"):
        put_schedules(app, list(app.tasks.values()), prune=False)
    [put] = node.requests("PUT", "/v1/schedules/tick")
    assert put.body["cron"] == "*/10 * * * * *" and put.body["paused"] is True
    assert put.body["task"] == {"task_type": "tick", "payload": {"args": [], "kwargs": {}},
                                "priority": 2, "timeout_s": 300, "max_retries": 3}
    assert "schedule tick updated: cron changed" in caplog.text


def test_a_missing_schedule_is_created(node, caplog):
    node.route("GET", "/v1/schedules/tick", lambda r: error("not_found", "no schedule", 404))
    node.json("PUT", "/v1/schedules/tick", 200, STORED)
    app = periodic_app(node.url)
    with caplog.at_level(logging.INFO, logger="tsched.tsworker"):
        put_schedules(app, list(app.tasks.values()), prune=False)
    [put] = node.requests("PUT", "/v1/schedules/tick")
    assert "paused" not in put.body and put.body["overlap"] == "skip"
    assert "schedule tick created" in caplog.text


@pytest.mark.parametrize("prune", [False, True])
def test_only_prune_deletes_schedules_the_app_does_not_declare(node, caplog, prune):
    node.json("GET", "/v1/schedules/tick", 200, STORED)
    node.json("GET", "/v1/schedules", 200, {"schedules": [STORED, {**STORED,
                                                                   "schedule_id": "old"}]})
    node.json("DELETE", "/v1/schedules/old", 200, {})
    app = periodic_app(node.url)
    with caplog.at_level(logging.INFO, logger="tsched.tsworker"):
        put_schedules(app, list(app.tasks.values()), prune=prune)
    deleted = node.requests("DELETE", "/v1/schedules/old")
    assert len(deleted) == (1 if prune else 0)
    assert node.requests("DELETE", "/v1/schedules/tick") == []
    if prune:
        assert deleted[0].query == {"tenant": "default"}
        assert "schedule old deleted (tenant default)" in caplog.text


def test_tasks_option_picks_the_served_tasks_and_their_schedules(node):
    app = periodic_app(node.url)

    @app.task(name="other")
    def other() -> None:
        pass
    assert [t.name for t in served_tasks(app, "other")] == ["other"]
    assert [t.name for t in served_tasks(app, " tick , other")] == ["tick", "other"]
    assert put_schedules(app, served_tasks(app, "other"), prune=False) == []
    assert node.seen == []   # no schedule of its own: nothing to put


@pytest.mark.parametrize("args, app_reserve, want", [
    ("--concurrency 10 --reserve low=10% --reserve batch=0.1", None, {"low": 0.1, "batch": 0.1}),
    ("--concurrency 20 --reserve low=10%,high=5%", None, {"low": 0.1, "high": 0.05}),
    ("--concurrency 10", "{'low': 0.2}", {"low": 0.2}),             # the app's
    ("--concurrency 10 --reserve normal=10%", "{'low': 0.2}", {"normal": 0.1}),   # overrides
    ("--concurrency 10", None, {}),
])
def test_reserve_reaches_the_worker(project, monkeypatch, caplog, args, app_reserve, want):
    ran = []
    monkeypatch.setattr("tsched.client.tsworker.Worker.run", lambda self: ran.append(self))
    source = TASKS_MODULE.format(url=dead_url())
    if app_reserve:
        source = source.replace('App("', f'App(reserve={app_reserve}, urls="', 1)
    with caplog.at_level(logging.INFO, logger="tsched.tsworker"):
        result = tsworker(project(source), *args.split())
    assert result.exit_code == 0, result.output
    assert {k: float(v) for k, v in ran[0].reserve.items()} == want
    assert ("reserved slots" in caplog.text) == bool(want)


@pytest.mark.parametrize("args, want", [("", 3.0), ("--session-timeout 10", 10.0),
                                        ("--session-timeout 0", None)])
def test_session_timeout_reaches_the_worker(project, monkeypatch, args, want):
    ran = []
    monkeypatch.setattr("tsched.client.tsworker.Worker.run", lambda self: ran.append(self))
    result = tsworker(project(TASKS_MODULE.format(url=dead_url())), *args.split())
    assert result.exit_code == 0, result.output
    assert ran[0].session_timeout_s == want


LIMIT_STORED = {"name": "partner", "rate": 50, "per_s": 1, "concurrency": None,
                "partition_by": "account_id", "in_use": 0, "held": 0, "partitions": []}


def limited_app(url: str) -> App:
    app = App(url, timeout_s=2)
    app.limit("partner", rate=50, partition_by="account_id")

    @app.task(name="call", limits=["partner"])
    def call(account_id: str) -> None:
        pass
    return app


def test_declared_limits_are_put_once_and_tasks_name_them(node, caplog):
    node.route("GET", "/v1/limits/partner", lambda r: error("not_found", "no limit", 404))
    node.json("PUT", "/v1/limits/partner", 200, LIMIT_STORED)
    node.json("POST", "/v1/tasks", 201, {"task_id": "a1", "state": "pending"})
    app = limited_app(node.url)
    with caplog.at_level(logging.INFO, logger="tsched.tsworker"):
        put_schedules(app, list(app.tasks.values()), prune=False)
    [put] = node.requests("PUT", "/v1/limits/partner")
    assert put.body == {"rate": 50, "per_s": 1, "partition_by": "account_id"}
    assert "limit partner declared" in caplog.text
    app.tasks["call"].submit("acct-1")
    assert node.requests("POST", "/v1/tasks")[0].body["limits"] == ["partner"]


def test_an_unchanged_limit_is_not_rewritten(node):
    node.json("GET", "/v1/limits/partner", 200, LIMIT_STORED)
    app = limited_app(node.url)
    put_schedules(app, list(app.tasks.values()), prune=False)
    assert node.requests("PUT", "/v1/limits/partner") == []


def test_limit_declarations_are_checked_at_once():
    app = App("http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(ValueError):
        app.limit("x")
    with pytest.raises(ValueError):
        app.limit("x", concurrency=2, per_s=1)
    app.limit("x", concurrency=2)
    with pytest.raises(ValueError):
        app.limit("x", concurrency=3)
    with pytest.raises(TypeError):
        app.task(name="t", limits="x")(lambda: None)
