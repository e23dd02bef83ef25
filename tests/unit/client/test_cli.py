"""tsctl: usage errors (exit 2), API errors (exit 1 with the code), no node (exit 3), and
output against a fake node (tables by default, JSON with --json)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tsched.client.cli import cli

try:
    from client_support import FakeNode, dead_url, error
except ImportError:  # collected as a package
    from tests.unit.client.client_support import FakeNode, dead_url, error

USAGE_ERRORS = [
    ["--url", "ftp://x", "list"],
    ["--timeout", "0", "list"],
    ["nope"],
    ["submit"],
    ["submit", "t", "--payload", "{bad"],
    ["submit", "t", "--priority", "11"],
    ["submit", "t", "--run-at", "2026-01-01T00:00:00Z", "--delay", "5"],
    ["submit", "t", "--run-at", "tomorrow"],
    ["submit", "t", "--run-at", "2026-01-01T00:00:00"],
    ["submit", "t", "--delay", "-1"],
    ["submit", "t", "--file", "/nonexistent/tasks.jsonl"],
    ["get"],
    ["get", "x", "--wait-timeout", "0"],
    ["list", "--state", "bogus"],
    ["list", "--limit", "0"],
    ["list", "--created-after", "yesterday"],
    ["list", "--created-before", "2026-12-01T00:00:00"],
    ["list", "--finished-after", "soon"],
    ["cancel"],
    ["cancel", "a", "b"],
    ["dlq", "nope"],
    ["dlq", "list", "--limit", "x"],
    ["dlq", "replay"],
    ["dlq", "discard"],
    ["schedules", "list", "extra"],
    ["schedules", "put", "s", "--task-type", "t"],
    ["schedules", "put", "s", "--cron", "* * * * *"],
    ["schedules", "put", "s", "--cron", "* * * * *", "--task-type", "t", "--payload", "{"],
    ["schedules", "get"],
    ["schedules", "pause"],
    ["schedules", "resume"],
    ["schedules", "trigger"],
    ["schedules", "delete"],
    ["schedules", "preview"],
    ["schedules", "preview", "* * * * *", "--count", "101"],
    ["tenants", "list", "x"],
    ["tenants", "set"],
    ["tenants", "set", "acme"],
    ["tenants", "set", "acme", "--weight", "0"],
    ["tenants", "set", "acme", "--max-running", "-1"],
    ["cluster", "status", "extra"],
    ["cluster", "transfer", "extra"],
    ["cluster", "nope"],
    ["dev", "extra"],
]


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


@pytest.mark.parametrize("argv", USAGE_ERRORS, ids=lambda a: " ".join(a))
def test_usage_errors_exit_2(argv):
    result = CliRunner().invoke(cli, ["--url", dead_url(), *argv])
    assert result.exit_code == 2, result.output
    assert "Usage" in result.output or "Error" in result.output


def test_submit_file_with_a_bad_line_is_a_usage_error(tmp_path):
    f = tmp_path / "tasks.jsonl"
    f.write_text('{"task_type": "a"}\n[1]\n')
    result = run("--url", dead_url(), "submit", "--file", str(f))
    assert result.exit_code == 2 and "line 2" in result.output


@pytest.fixture
def node():
    n = FakeNode()
    yield n
    n.close()


def test_api_error_exits_1_with_its_code(node):
    node.route("GET", "/v1/tasks/missing", lambda r: error("not_found", "no task missing", 404))
    result = run("--url", node.url, "get", "missing")
    assert result.exit_code == 1
    assert "not_found" in result.output and "no task missing" in result.output


def test_no_node_answering_exits_3():
    result = run("--url", f"{dead_url()},{dead_url()}", "--timeout", "0.5", "list")
    assert result.exit_code == 3
    assert "unavailable" in result.output


def test_url_and_token_from_the_environment(node, monkeypatch):
    node.json("GET", "/v1/tenants", 200, {"tenants": [{"tenant": "acme", "max_running": 2,
                                                        "weight": 1, "running": 0, "pending": 4}]})
    monkeypatch.setenv("TSCTL_URL", node.url)
    monkeypatch.setenv("TSCTL_TOKEN", "tok")
    result = run("tenants", "list")
    assert result.exit_code == 0
    assert node.seen[0].headers["Authorization"] == "Bearer tok"
    lines = result.output.splitlines()
    assert lines[0].split() == ["TENANT", "MAX_RUNNING", "WEIGHT", "RUNNING", "PENDING"]
    assert lines[1].split() == ["acme", "2", "1", "0", "4"]


TASK = {"task_id": "t1", "task_type": "email", "tenant": "default", "state": "completed",
        "priority": 5, "attempt": 1, "run_at": "2026-11-30T05:00:00Z", "result": {"ok": True},
        "attempts": [{"attempt": 1, "worker_id": "w-1", "fencing_token": 3,
                      "started_at": "2026-11-30T05:00:00Z", "ended_at": "2026-11-30T05:00:01Z",
                      "outcome": "completed", "error": None}], "applied_seq": 4}


def test_get_prints_a_detail_table_or_json(node):
    node.json("GET", "/v1/tasks/t1", 200, TASK)
    text = run("--url", node.url, "get", "t1")
    assert text.exit_code == 0
    assert "state" in text.output and "completed" in text.output
    assert "attempts:" in text.output and "w-1" in text.output
    as_json = run("--url", node.url, "--json", "get", "t1")
    assert json.loads(as_json.stdout) == TASK


def test_get_wait_polls_until_terminal(node):
    answers = iter(["pending", "running", "completed"])
    node.route("GET", "/v1/tasks/t1", lambda r: (200, {**TASK, "state": next(answers)}))
    result = run("--url", node.url, "--json", "get", "t1", "--wait")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["state"] == "completed"
    assert len(node.requests("GET", "/v1/tasks/t1")) == 3


def test_reads_ask_the_leader_unless_told_to_read_locally(node, monkeypatch):
    """A read sends consistency=linearizable (the leader answers it), so it sees writes
    an earlier tsctl made through another node; `--consistency local`, or
    TSCTL_CONSISTENCY=local, reads the asked node's replica. `get --wait` polls locally
    after its first read."""
    node.json("GET", "/v1/tasks/t1", 200, TASK)
    assert run("--url", node.url, "get", "t1").exit_code == 0
    assert run("--url", node.url, "--consistency", "local", "get", "t1").exit_code == 0
    monkeypatch.setenv("TSCTL_CONSISTENCY", "local")
    assert run("--url", node.url, "get", "t1").exit_code == 0
    monkeypatch.setenv("TSCTL_CONSISTENCY", "bogus")
    assert run("--url", node.url, "get", "t1").exit_code == 2
    monkeypatch.delenv("TSCTL_CONSISTENCY")
    answers = iter(["pending", "running", "completed"])
    node.route("GET", "/v1/tasks/t1", lambda r: (200, {**TASK, "state": next(answers)}))
    assert run("--url", node.url, "get", "t1", "--wait").exit_code == 0
    sent = [r.query.get("consistency") for r in node.requests("GET", "/v1/tasks/t1")]
    assert sent == ["linearizable", None, None, "linearizable", "local", "local"]


def test_submit_sends_the_options(node):
    node.json("POST", "/v1/tasks", 201, {"task_id": "t9", "state": "pending", "duplicate": True})
    result = run("--url", node.url, "submit", "email", "--payload", '{"to": "a@b.c"}',
                 "--tenant", "acme", "--priority", "2", "--delay", "1.5")
    assert result.exit_code == 0
    assert result.output.strip() == "t9  pending (duplicate)"
    assert node.seen[0].body == {"task_type": "email", "payload": {"to": "a@b.c"},
                                 "tenant": "acme", "priority": 2, "delay_s": 1.5}


def test_submit_file_batches(node, tmp_path):
    def submitted(req):
        return 201, {"tasks": [{"task_id": f"id{i}", "state": "pending", "duplicate": False}
                               for i, _ in enumerate(req.body["tasks"])]}
    node.route("POST", "/v1/tasks", submitted)
    f = tmp_path / "tasks.jsonl"
    f.write_text("".join(json.dumps({"task_type": "a", "payload": i}) + "\n" for i in range(250)))
    result = run("--url", node.url, "submit", "--file", str(f), "--tenant", "acme")
    assert result.exit_code == 0
    assert "submitted 250 tasks" in result.output
    sizes = [len(s.body["tasks"]) for s in node.requests("POST", "/v1/tasks")]
    assert sizes == [100, 100, 50]
    assert node.seen[0].body["tasks"][0] == {"task_type": "a", "payload": 0, "tenant": "acme"}


def test_cluster_status_table(node):
    node.json("GET", "/v1/cluster", 200, {"leader": "n2", "term": 7, "nodes": [
        {"id": "n1", "http": "127.0.0.1:1", "raft": "127.0.0.1:2", "role": "follower",
         "commit_index": 10, "applied_seq": 9, "digest": "ab", "reachable": True}]})
    result = run("--url", node.url, "cluster", "status")
    assert result.exit_code == 0
    assert result.output.splitlines()[0] == "leader: n2   term: 7"
    assert "follower" in result.output and "yes" in result.output


def test_schedule_preview_and_transfer(node):
    node.json("GET", "/v1/cron/preview", 200, {"fires": ["2026-12-01T03:00:00+01:00"]})
    node.json("POST", "/v1/cluster/transfer-leadership", 202, {})
    result = run("--url", node.url, "schedules", "preview", "0 3 * * *", "--tz", "Europe/Paris",
                 "--count", "1")
    assert result.exit_code == 0 and result.output.strip() == "2026-12-01T03:00:00+01:00"
    assert node.seen[0].query == {"cron": "0 3 * * *", "timezone": "Europe/Paris", "count": "1"}
    assert run("--url", node.url, "cluster", "transfer", "--to", "n3").exit_code == 0
    assert node.seen[1].body == {"to": "n3"}


def test_dev_without_a_config_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()   # stop the upward search here
    result = run("dev")
    assert result.exit_code == 1 and "cluster.toml" in result.output


def test_option_bounds_are_the_state_machine_limits():
    """tsctl refuses locally what the API would refuse (statemachine/limits.py)."""
    from tsched.statemachine.limits import LIMITS

    submit = {p.name: p.type for p in cli.commands["submit"].params}
    assert submit["max_retries"].max == LIMITS.max_retries_max
    assert submit["priority"].max == LIMITS.priority_max
    assert submit["delay"].max * 1000 == LIMITS.run_at_ahead_ms_max
    tenant_set = {p.name: p.type for p in cli.commands["tenants"].commands["set"].params}
    assert tenant_set["weight"].max == LIMITS.tenant_weight_max
    assert tenant_set["max_running"].max == LIMITS.tenant_running_max
    result = CliRunner().invoke(cli, ["--url", "http://127.0.0.1:9", "tenants", "set", "acme",
                                      "--weight", "1001"])
    assert result.exit_code == 2 and "1001" in result.output


def test_list_follows_pages_that_stop_early_and_sends_the_time_filters(node):
    """A node's page may stop at its scan bound with no task and a cursor (DESIGN 7):
    `tsctl list` goes on until the limit or the end."""
    pages = {None: ([], "900"), "900": (["b"], "400"), "400": ([], "7"), "7": (["a"], None)}

    def listing(req):
        ids, nxt = pages[req.query.get("cursor")]
        return 200, {"tasks": [{"task_id": i, "state": "completed"} for i in ids],
                     "next_cursor": nxt, "applied_seq": 1}
    node.route("GET", "/v1/tasks", listing)
    result = run("--url", node.url, "--json", "list", "--type", "rare", "--schedule", "s1",
                 "--created-after", "2026-12-01T00:00:00Z", "--created-before", "1764600000",
                 "--finished-after", "2026-12-02T00:00:00+01:00")
    assert result.exit_code == 0, result.output
    assert [t["task_id"] for t in json.loads(result.output)] == ["b", "a"]
    first = node.seen[0].query
    assert (first["task_type"], first["schedule_id"]) == ("rare", "s1")
    assert first["created_after"] == "2026-12-01T00:00:00Z"
    assert first["created_before"] == "1764600000.0"
    assert first["finished_after"] == "2026-12-02T00:00:00+01:00"
    assert [s.query.get("cursor") for s in node.seen] == [None, "900", "400", "7"]
