"""`tsctl limits put|list|get|delete` and `tsctl submit --limit`: what they send, how they
show a limit, and usage errors (exit 2) for values out of the API's bounds."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from tsched.client.cli import cli

from tests.unit.client.client_support import FakeNode, dead_url

LIMIT = {"name": "partner", "rate": 50, "per_s": 1, "concurrency": 10,
         "partition_by": "account_id", "in_use": 3, "in_window": 7, "held": 2,
         "partition_count": 1,
         "partitions": [{"partition": "acct-1", "running": 3, "in_window": 7, "held": 2}]}


@pytest.mark.parametrize("args", [
    ["limits", "put", "p"], ["limits", "put", "p", "--rate", "0"],
    ["limits", "put", "p", "--concurrency", "0"], ["limits", "put", "p", "--per", "2"],
    ["limits", "put", "p", "--rate", "5", "--per", "0"],
], ids=lambda a: " ".join(a))
def test_bad_puts_are_usage_errors(args):
    result = CliRunner().invoke(cli, ["--url", dead_url(), *args])
    assert result.exit_code == 2, result.output


def test_put_sends_the_limit_and_shows_its_partitions():
    node = FakeNode()
    try:
        node.json("PUT", "/v1/limits/partner", 200, LIMIT)
        result = CliRunner().invoke(cli, [
            "--url", node.url, "limits", "put", "partner", "--rate", "50", "--per", "1",
            "--concurrency", "10", "--partition-by", "account_id"])
        assert result.exit_code == 0, result.output
        [put] = node.requests("PUT", "/v1/limits/partner")
        assert put.body == {"rate": 50, "per_s": 1, "concurrency": 10,
                            "partition_by": "account_id"}
        assert "busiest partitions" in result.output and "acct-1" in result.output
    finally:
        node.close()


def test_list_get_delete_and_json():
    node = FakeNode()
    try:
        node.json("GET", "/v1/limits", 200, {"limits": [LIMIT]})
        node.json("GET", "/v1/limits/partner", 200, LIMIT)
        node.json("DELETE", "/v1/limits/partner", 200, LIMIT)
        out = CliRunner().invoke(cli, ["--url", node.url, "limits", "list"])
        assert out.exit_code == 0 and "partner" in out.output and "IN_USE" in out.output
        out = CliRunner().invoke(cli, ["--url", node.url, "--json", "limits", "get", "partner"])
        assert out.exit_code == 0 and '"held": 2' in out.output
        out = CliRunner().invoke(cli, ["--url", node.url, "limits", "delete", "partner"])
        assert out.exit_code == 0, out.output
        assert len(node.requests("DELETE", "/v1/limits/partner")) == 1
    finally:
        node.close()


def test_an_unknown_limit_is_exit_1_with_its_code():
    node = FakeNode()
    try:
        node.json("GET", "/v1/limits/nope", 404, {"error": {
            "code": "not_found", "message": "no limit nope", "details": {}}})
        out = CliRunner().invoke(cli, ["--url", node.url, "limits", "get", "nope"])
        assert out.exit_code == 1 and "not_found" in out.output
    finally:
        node.close()


def test_submit_names_its_limits_and_get_shows_why_a_task_waits():
    node = FakeNode()
    try:
        node.json("POST", "/v1/tasks", 201, {"task_id": "t1", "state": "pending"})
        node.json("GET", "/v1/tasks/t1", 200, {
            "task_id": "t1", "state": "pending", "attempts": [],
            "limited_by": {"limit": "partner", "partition": "acct-1", "until": None}})
        out = CliRunner().invoke(cli, ["--url", node.url, "submit", "call", "--limit",
                                       "partner", "--limit", "bank"])
        assert out.exit_code == 0, out.output
        [sent] = node.requests("POST", "/v1/tasks")
        assert sent.body["limits"] == ["partner", "bank"]
        out = CliRunner().invoke(cli, ["--url", node.url, "get", "t1"])
        assert "partner (partition acct-1) until a running task of it ends" in out.output
    finally:
        node.close()
