"""`tsctl schedules put` with the schedule policies the Python client has: what it sends,
and usage errors (exit 2) for values out of the API's bounds."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from tsched.client.cli import cli

from tests.unit.client.client_support import FakeNode, dead_url

PUT = ["schedules", "put", "s", "--cron", "*/5 * * * * *", "--task-type", "t"]


@pytest.mark.parametrize("extra", [
    ["--overlap", "never"], ["--misfire", "later"], ["--catchup-window", "-1"],
    ["--catchup-window", str(7 * 86_400 + 1)], ["--priority", "11"], ["--jitter", "3601"],
    ["--start-at", "tomorrow"], ["--end-at", "2026-01-01T00:00:00"],
], ids=lambda a: " ".join(a))
def test_out_of_bounds_policies_are_usage_errors(extra):
    result = CliRunner().invoke(cli, ["--url", dead_url(), *PUT, *extra])
    assert result.exit_code == 2, result.output


def test_put_sends_every_policy():
    node = FakeNode()
    try:
        node.json("PUT", "/v1/schedules/s", 200, {"schedule_id": "s", "cron": "*/5 * * * * *",
                                                  "task": {"task_type": "t"}})
        result = CliRunner().invoke(cli, [
            "--url", node.url, *PUT, "--overlap", "skip", "--misfire", "run_once",
            "--catchup-window", "120", "--priority", "1", "--jitter", "2.5",
            "--start-at", "2030-01-01T00:00:00Z", "--end-at", "1924992000"])
        assert result.exit_code == 0, result.output
        [put] = node.requests("PUT", "/v1/schedules/s")
        assert put.body == {"cron": "*/5 * * * * *", "task": {"task_type": "t", "priority": 1},
                            "overlap": "skip", "misfire": "run_once", "catchup_window_s": 120,
                            "jitter_s": 2.5, "start_at": "2030-01-01T00:00:00Z",
                            "end_at": 1924992000}
    finally:
        node.close()
