"""`tsctl pause|resume|queues` (issue 48): what they send, how they show a pause, and usage
errors (exit 2). The real cluster path: tests/integration/test_schedules_cluster.py."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from tsched.client.cli import cli

from tests.unit.client.client_support import FakeNode, dead_url

PAUSE = {"task_type": "charge", "tenant": None, "paused_at": "2026-12-06T10:00:00.000Z",
         "actor": "admin", "reason": "bank down"}


@pytest.mark.parametrize("args", [["pause"], ["resume"], ["pause", "--reason", "x"],
                                  ["pause", "--type", "t", "--reason", "r" * 257]],
                         ids=lambda a: " ".join(a))
def test_a_pause_without_a_selector_is_a_usage_error(args):
    result = CliRunner().invoke(cli, ["--url", dead_url(), *args])
    assert result.exit_code == 2, result.output


def test_pause_resume_and_the_listing():
    node = FakeNode()
    try:
        node.json("POST", "/v1/queues/pause", 200, {**PAUSE, "changed": False})
        node.json("POST", "/v1/queues/resume", 200, {**PAUSE, "changed": True,
                                                      "resumed_at": PAUSE["paused_at"]})
        node.json("GET", "/v1/queues", 200, {"pauses": [PAUSE]})
        out = CliRunner().invoke(cli, ["--url", node.url, "pause", "--type", "charge",
                                       "--reason", "bank down"])
        assert out.exit_code == 0 and "paused already" in out.output, out.output
        [sent] = node.requests("POST", "/v1/queues/pause")
        assert sent.body == {"task_type": "charge", "reason": "bank down"}
        out = CliRunner().invoke(cli, ["--url", node.url, "resume", "--type", "charge"])
        assert out.exit_code == 0 and out.output.startswith("resumed task_type=charge")
        out = CliRunner().invoke(cli, ["--url", node.url, "queues"])
        assert out.exit_code == 0 and "bank down" in out.output and "REASON" in out.output
        out = CliRunner().invoke(cli, ["--url", node.url, "queues", "--json"])
        assert out.exit_code == 0 and '"reason": "bank down"' in out.output
    finally:
        node.close()


def test_tsctl_get_says_which_pause_holds_a_task():
    from tsched.client import render
    out = render.task_detail({"task_id": "t1", "state": "pending", "paused": PAUSE})
    assert "\npaused: task_type=charge, tenant=* since 2026-12-06T10:00:00.000Z by admin: " \
        "bank down" in out
