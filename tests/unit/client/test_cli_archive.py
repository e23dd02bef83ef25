"""`tsctl archive search` without --dir: GET /v1/archive of the node, every page followed,
repeats dropped by task id, skipped files reported; usage errors exit 2 (DESIGN 14.3)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tsched.client.cli import cli

try:
    from client_support import FakeNode, error
except ImportError:  # collected as a package
    from tests.unit.client.client_support import FakeNode, error


def record(tid: str, tenant: str = "acme", task_type: str = "t", attempt: int = 1) -> dict:
    return {"v": 1, "archived_at": "2026-01-02T00:00:00Z", "task": {
        "task_id": tid, "tenant": tenant, "task_type": task_type, "state": "completed",
        "attempt": attempt, "completed_at": "2026-01-01T10:00:00Z", "last_error": None}}


@pytest.fixture
def node():
    n = FakeNode()
    yield n
    n.close()


def run(*argv, **kw):
    return CliRunner().invoke(cli, list(argv), catch_exceptions=False, **kw)


def pages(req):
    """Three pages: a repeat of "a" (a replayed Tick) on the last, and a skipped file."""
    cursor = req.query.get("cursor")
    if cursor is None:
        return 200, {"records": [record("a"), record("b", task_type="u")],
                     "next_cursor": "p2", "node": "n1", "skipped": []}
    if cursor == "p2":
        return 200, {"records": [], "next_cursor": "p3", "node": "n1",
                     "skipped": [{"file": "tasks-2026-01-02.jsonl.gz", "reason": "truncated"}]}
    return 200, {"records": [record("a", attempt=2), record("c")], "next_cursor": None,
                 "node": "n1", "skipped": []}


def test_search_follows_every_page_and_drops_repeats(node, monkeypatch):
    node.route("GET", "/v1/archive", pages)
    monkeypatch.setenv("TSCTL_URL", node.url)
    monkeypatch.setenv("TSCTL_TOKEN", "root")
    out = run("archive", "search", "--tenant", "acme", "--from", "2026-01-01",
              "--to", "2026-01-01T12:00:00Z", "--json")
    assert out.exit_code == 0, out.output
    got = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["task"]["task_id"] for r in got] == ["b", "a", "c"]
    assert got[1]["task"]["attempt"] == 2                   # the last copy wins
    assert "skipped tasks-2026-01-02.jsonl.gz: truncated" in out.stderr
    sent = node.requests("GET", "/v1/archive")
    assert [s.query.get("cursor") for s in sent] == [None, "p2", "p3"]
    assert sent[0].query == {"tenant": "acme", "from": "2026-01-01",
                             "to": "2026-01-01T12:00:00Z", "limit": "1000"}
    assert all(s.headers["Authorization"] == "Bearer root" for s in sent)
    table = run("--url", node.url, "archive", "search", "--tenant", "acme", "--type", "u")
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["TASK_ID", "TYPE", "TENANT"] and len(lines) == 2
    assert lines[1].split()[:2] == ["b", "u"]


def test_by_task_id_and_the_nodes_errors(node):
    node.json("GET", "/v1/archive", 200, {"records": [record("x")], "next_cursor": None,
                                          "node": "n1", "skipped": []})
    out = run("--url", node.url, "archive", "search", "--task-id", "x", "--json")
    assert out.exit_code == 0 and json.loads(out.stdout)["task"]["task_id"] == "x"
    assert node.seen[-1].query == {"task_id": "x", "limit": "1000"}
    node.route("GET", "/v1/archive", lambda r: error(
        "archive_not_configured", "node n1 has no [archive] section", 404))
    off = run("--url", node.url, "archive", "search", "--task-id", "x")
    assert off.exit_code == 1 and "archive_not_configured" in off.output
    node.route("GET", "/v1/archive", lambda r: error("forbidden", "needs an admin token", 403))
    refused = run("--url", node.url, "archive", "search", "--tenant", "acme")
    assert refused.exit_code == 1 and "forbidden" in refused.output


@pytest.mark.parametrize("argv", [
    ["archive", "search"],                                         # neither
    ["archive", "search", "--tenant", "a", "--task-id", "x"],      # both
    ["archive", "search", "--tenant", "a", "--from", "yesterday"],
    ["archive", "search", "--tenant", "a", "--to", "2026-01-01T00:00:00"],   # no offset
    ["archive", "search", "--tenant", "a", "--from", "2026-02-30"],
])
def test_usage_errors_exit_2_before_any_request(node, argv):
    out = run("--url", node.url, *argv)
    assert out.exit_code == 2, out.output
    assert node.seen == []


def test_with_dir_a_day_bounds_the_whole_day(tmp_path):
    import gzip
    lines = b"".join(json.dumps(record(t)).encode() + b"\n" for t in ("a", "b"))
    (tmp_path / "tasks-2026-01-02.jsonl.gz").write_bytes(gzip.compress(lines))
    out = run("archive", "search", "--dir", str(tmp_path), "--from", "2026-01-01",
              "--to", "2026-01-01", "--json")
    assert [json.loads(x)["task"]["task_id"] for x in out.stdout.splitlines()] == ["a", "b"]
    none = run("archive", "search", "--dir", str(tmp_path), "--from", "2026-01-02", "--json")
    assert none.stdout == ""
