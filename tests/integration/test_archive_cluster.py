"""The audit archive on a real 3-node cluster (DESIGN 14.3): with `[archive] dir`, every
node writes the tasks retention evicts to its own files under its data_dir, a killed and
restarted node replays its log and archives nothing twice as far as a reader can tell
and removes the day files older than keep_days, and `tsctl archive search` finds them."""
from __future__ import annotations

import json
import shutil
import time

import pytest
from click.testing import CliRunner

from tests.harness.cluster import running
from tests.harness.waits import wait_until
from tsched.client import ApiError, Client
from tsched.client.cli import cli
from tsched.client.archive import Query, search
from tsched.statemachine.archive_format import DAY_MS, file_name

pytestmark = pytest.mark.slow
RETENTION_MS = 2_000
KEEP_DAYS = 30
TOML = (f'\n[archive]\ndir = "archive"\nkeep_days = {KEEP_DAYS}\n\n'
        f'[limits]\nretention_ms = {RETENTION_MS}\n')


@pytest.fixture
def archiving(tmp_path):
    yield from running(tmp_path, extra_toml=TOML)


def archived_ids(cluster, node: str, **query) -> list[str]:
    directory = cluster.data_dir(node) / "archive"
    if not directory.exists():
        return []
    return sorted(r["task"]["task_id"] for r in search(directory, Query(**query)).records)


def test_evicted_tasks_are_archived_by_every_node_and_searchable(archiving):
    cluster = archiving
    with Client(cluster.urls, timeout_s=30) as client:
        done = client.submit("statement", {"account": 7}, tenant="bank")
        dead = client.submit("settle", tenant="bank", max_retries=0)
        for task in client.claim("w1", ["statement", "settle"], max_tasks=2, wait_s=5):
            if task["task_type"] == "statement":
                client.complete(task["task_id"], task["fencing_token"], {"pages": 2})
            else:
                client.fail(task["task_id"], task["fencing_token"], "partner bank down",
                            retryable=False)
        want = sorted([done["task_id"], dead["task_id"]])
        for node in cluster.ids:      # retention evicts on every replica; each archives
            wait_until(lambda node=node: archived_ids(cluster, node) == want, 60, f"{node}'s archive")
        with pytest.raises(ApiError) as gone:
            client.get(done["task_id"])          # gone from the state
        assert gone.value.code == "not_found"

    # a node killed after archiving replays its log on restart: readers still see each
    # task once, as it was when evicted
    # and, at its start, removes the day files that ended keep_days or more ago
    victim = cluster.ids[-1]
    cluster.kill(victim)
    directory = cluster.data_dir(victim) / "archive"
    today = sorted(directory.glob("tasks-*.jsonl.gz"))[-1]
    now_ms = time.time_ns() // 1_000_000
    old, kept = file_name(now_ms - (KEEP_DAYS + 2) * DAY_MS), file_name(now_ms - 3 * DAY_MS)
    for name in (old, kept):
        shutil.copy(today, directory / name)
    cluster.restart(victim)
    cluster.wait_leader()
    wait_until(lambda: not (directory / old).exists(), 30, f"{old} pruned")
    assert (directory / kept).exists()
    (directory / kept).unlink()
    found = search(directory, Query())
    assert sorted(r["task"]["task_id"] for r in found.records) == want and not found.skipped

    directory = str(cluster.data_dir(cluster.ids[0]) / "archive")
    result = CliRunner().invoke(cli, ["archive", "search", "--dir", directory,
                                      "--task-id", dead["task_id"], "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (record,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert record["task"]["state"] == "dead_letter"
    assert record["task"]["attempts"][0]["error"] == "partner bank down"
    table = CliRunner().invoke(cli, ["archive", "search", "--dir", directory, "--tenant",
                                     "bank", "--type", "statement"], catch_exceptions=False)
    assert done["task_id"] in table.stdout and dead["task_id"] not in table.stdout
