"""tsctl audit (DESIGN 14.6): filters go out as the query, pages are followed, a table by
default and JSON lines with --json; bad options are usage errors."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tsched.client.cli import cli

try:
    from client_support import FakeNode, dead_url
except ImportError:  # collected as a package
    from tests.unit.client.client_support import FakeNode, dead_url

ENTRY = {"id": 7, "at": "2026-12-01T15:00:00.000Z", "actor": "tenant:acme",
         "action": "task.cancel", "tenant": "acme", "target": "t1", "request_id": "r1",
         "change": {"before": {"state": "pending"}, "after": {"state": "cancelled"}}}
OLDER = {**ENTRY, "id": 6, "actor": "admin", "action": "schedule.put", "target": "acme/s1"}


@pytest.fixture
def node():
    n = FakeNode()
    yield n
    n.close()


def _pages(node: FakeNode) -> None:
    def answer(req):
        if req.query.get("cursor") == "6":
            return 200, {"entries": [OLDER], "next_cursor": None, "applied_seq": 3}
        return 200, {"entries": [ENTRY], "next_cursor": "6", "applied_seq": 3}
    node.route("GET", "/v1/audit", answer)


def test_audit_prints_a_table_following_the_cursor(node):
    _pages(node)
    result = CliRunner().invoke(cli, ["--url", node.url, "audit", "--actor", "tenant:acme",
                                      "--action", "task.cancel", "--since",
                                      "2026-12-01T00:00:00Z"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["AT", "ACTOR", "ACTION", "TARGET", "CHANGE"]
    assert lines[1].split()[:4] == ["2026-12-01T15:00:00.000Z", "tenant:acme", "task.cancel",
                                    "t1"]
    assert "admin" in lines[2] and "acme/s1" in lines[2]
    first = node.seen[0].query
    assert first["actor"] == "tenant:acme" and first["action"] == "task.cancel"
    assert first["since"].startswith("2026-12-01T00:00:00") and "target" not in first
    assert node.seen[1].query["cursor"] == "6"


def test_audit_json_lines_and_limit(node):
    _pages(node)
    result = CliRunner().invoke(cli, ["--url", node.url, "audit", "--json", "--limit", "1"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.output.splitlines()] == [ENTRY]
    assert node.seen[0].query["limit"] == "1" and len(node.seen) == 1


@pytest.mark.parametrize("argv", [["--limit", "0"], ["--since", "yesterday"],
                                  ["--actor", "a" * 129], ["--target", ""], ["extra"]])
def test_audit_usage_errors_exit_2(argv):
    result = CliRunner().invoke(cli, ["--url", dead_url(), "audit", *argv])
    assert result.exit_code == 2, result.output
