"""Readable failures on a real 3-node cluster (DESIGN 14.1): a failing handler's exception
type, message and traceback per attempt (API and `tsctl get`), the Worker's retry_on /
no_retry_on, the `retrying` view with `next_retry_at`, and `discard` keeping the dead
letter as `discarded`."""
from __future__ import annotations

import json
import pytest
from click.testing import CliRunner

from tests.harness.waits import wait_until
from tests.integration.worker_support import running
from tsched.client import Client, Worker
from tsched.client.cli import cli

pytestmark = pytest.mark.slow
DEADLINE_S = 60.0
# the first retry waits long enough to be seen as `retrying`; the test then replays nothing
SLOW_RETRY = {"backoff": "fixed", "base_s": 30, "max_s": 30, "jitter": 0}


class PartnerBankUnreachable(ConnectionError):
    pass


def settle(handler_calls: list, task_id: str):
    def handler(payload, ctx):
        handler_calls.append(ctx.attempt)
        if payload["kind"] == "bank":
            raise PartnerBankUnreachable(f"partner bank for {payload['iban']} did not answer")
        raise ValueError(f"malformed amount {payload['amount']!r}")
    return handler


def tsctl(cluster, *args: str) -> str:
    argv = ["--url", ",".join(cluster.urls), *args]
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code == 0, f"tsctl {' '.join(args)}: {result.output}"
    return result.stdout


def test_failures_are_readable_retried_by_type_and_discarded_for_audit(cluster):
    calls: list[int] = []
    with Client(cluster.urls, timeout_s=30) as client:
        bank = client.submit("settle", {"kind": "bank", "iban": "DE02"}, max_retries=2,
                             retry=SLOW_RETRY)
        bad = client.submit("settle", {"kind": "amount", "amount": "12,5"}, max_retries=2,
                            retry=SLOW_RETRY)
        worker = Worker(cluster.urls, {"settle": settle(calls, bank["task_id"])},
                        wait_s=0.5, grace_s=2.0, retry_on={"settle": ["ConnectionError"]},
                        no_retry_on={"settle": ["ValueError"]})
        with running(worker):
            wait_until(lambda: client.get(bad["task_id"])["state"] == "dead_letter",
                       DEADLINE_S, "the non-retryable failure dead-lettered")
            retrying = wait_until(lambda: (t := client.get(bank["task_id"]))["status"]
                                == "retrying" and t, DEADLINE_S, "the retryable failure retrying")

        # retryable (a base class is listed): pending, reading as retrying until its backoff
        assert retrying["state"] == "pending" and retrying["next_retry_at"] == retrying["run_at"]
        (first,) = retrying["attempts"]
        detail = first["error_detail"]
        assert first["outcome"] == "failed" and detail["type"] == "PartnerBankUnreachable"
        assert detail["message"] == "partner bank for DE02 did not answer"
        assert detail["traceback"].startswith("Traceback (most recent call last)")
        assert "raise PartnerBankUnreachable" in detail["traceback"]
        assert first["error"] == retrying["last_error"] == \
            "PartnerBankUnreachable: partner bank for DE02 did not answer"

        # the retrying view filters listings; pending still lists every pending task
        listed = [t["task_id"] for t in client.list(state="retrying", task_type="settle")]
        assert listed == [bank["task_id"]]
        pending = [t["task_id"] for t in client.list(state="pending", task_type="settle")]
        assert pending == [bank["task_id"]]

        # not retryable (no_retry_on): dead letter after one attempt, traceback kept
        dead = client.get(bad["task_id"])
        assert dead["status"] == "dead_letter" and dead["next_retry_at"] is None
        assert len(dead["attempts"]) == 1 and calls.count(1) == 2
        assert dead["attempts"][0]["error_detail"]["type"] == "ValueError"

        # tsctl get: one row per attempt, and the traceback in full
        shown = tsctl(cluster, "get", bad["task_id"])
        assert "attempt 1 ValueError: malformed amount '12,5'" in shown
        assert "raise ValueError(" in shown
        assert json.loads(tsctl(cluster, "--json", "list", "--state", "retrying",
                                "--type", "settle"))[0]["task_id"] == bank["task_id"]

        # discard keeps the dead letter, errors and all, as `discarded`
        kept = client.discard(bad["task_id"])
        assert kept["state"] == "discarded"
        cluster.wait_applied(kept["applied_seq"])
        for url in cluster.urls:      # every replica keeps it
            with Client([url], timeout_s=30) as one:
                got = one.get(bad["task_id"])
                assert got["state"] == "discarded"
                assert got["attempts"][0]["error_detail"]["message"] == "malformed amount '12,5'"
        assert [t["task_id"] for t in client.list(state="discarded", task_type="settle")] \
            == [bad["task_id"]]
        assert not list(client.dlq_list())
