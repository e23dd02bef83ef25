"""tsctl cluster members / add-node / remove-node (DESIGN 6.2) against a fake node: what is
sent, the table and --json output, usage errors, and a refusal's code."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tsched.client.cli import cli

try:
    from client_support import FakeNode, dead_url, error
except ImportError:  # collected as a package
    from tests.unit.client.client_support import FakeNode, dead_url, error

MEMBERS = {"members": [{"id": "n1", "raft": "127.0.0.1:1", "http": "127.0.0.1:2"},
                       {"id": "n4", "raft": "127.0.0.1:3", "http": "127.0.0.1:4"}],
           "leader": "n1", "applied_seq": 9}


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def node():
    n = FakeNode()
    yield n
    n.close()


@pytest.mark.parametrize("argv", [
    ["cluster", "add-node"],
    ["cluster", "add-node", "n4"],
    ["cluster", "add-node", "n4", "--raft", "127.0.0.1:3"],
    ["cluster", "add-node", "n4", "--http", "127.0.0.1:4"],
    ["cluster", "remove-node"],
    ["cluster", "remove-node", "a", "b"],
    ["cluster", "members", "extra"],
])
def test_usage_errors_exit_2(argv):
    result = CliRunner().invoke(cli, ["--url", dead_url(), *argv])
    assert result.exit_code == 2, result.output


def test_add_node_sends_the_member_and_shows_the_members(node):
    node.json("POST", "/v1/cluster/members", 200, MEMBERS)
    result = run("--url", node.url, "cluster", "add-node", "n4", "--raft", "127.0.0.1:3",
                 "--http", "127.0.0.1:4")
    assert result.exit_code == 0, result.output
    (seen,) = node.requests("POST", "/v1/cluster/members")
    assert seen.body == {"id": "n4", "raft": "127.0.0.1:3", "http": "127.0.0.1:4"}
    assert seen.headers.get("Idempotency-Key")
    lines = result.output.splitlines()
    assert lines[0] == "added n4"
    assert lines[1].split() == ["ID", "RAFT", "HTTP", "LEADER"]
    assert lines[2].split() == ["n1", "127.0.0.1:1", "127.0.0.1:2", "*"]
    assert lines[3].split() == ["n4", "127.0.0.1:3", "127.0.0.1:4"]


def test_remove_node_and_json_output(node):
    node.json("DELETE", "/v1/cluster/members/n3", 200, MEMBERS)
    result = run("--url", node.url, "--json", "cluster", "remove-node", "n3")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["members"] == MEMBERS["members"]
    assert len(node.requests("DELETE", "/v1/cluster/members/n3")) == 1


def test_members_lists_them(node):
    node.json("GET", "/v1/cluster/members", 200, MEMBERS)
    result = run("--url", node.url, "cluster", "members")
    assert result.exit_code == 0 and "n4" in result.output


def test_a_refusal_exits_1_with_its_code(node):
    node.route("DELETE", "/v1/cluster/members/n1",
               lambda r: error("conflict", "removing n1 would leave 2 members", 409))
    result = run("--url", node.url, "cluster", "remove-node", "n1")
    assert result.exit_code == 1
    assert "conflict" in result.output and "leave 2 members" in result.output
