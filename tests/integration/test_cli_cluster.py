"""tsctl against a real 3-node cluster: every verb's success path (exit 0), in tables and
in JSON, an API error (exit 1), and the leader's no-worker hint read through a follower."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tsched.client import Client
from tsched.client.cli import cli

from tests.harness.cluster import running
from tests.harness.raft_options import timeouts_toml
from tests.harness.waits import wait_until

pytestmark = pytest.mark.slow
HINT_WINDOW_S = 2      # the cluster's unclaimed_hint_s: 2 s without a claim for a type
DEADLINE_S = 30        # a bound only


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The module's 3-node cluster, whose leader gives the no-worker hint after
    HINT_WINDOW_S (not 2 minutes). tsctl prints the hint on stderr: the verbs' tests read
    stdout."""
    toml = timeouts_toml() + f"unclaimed_hint_s = {HINT_WINDOW_S}\n"
    yield from running(tmp_path_factory.mktemp("cluster"), extra_toml=toml)


@pytest.fixture
def tsctl(cluster):
    url = ",".join(cluster.urls)

    def run(*args: str, as_json: bool = False):
        argv = ["--url", url, *(["--json"] if as_json else []), *args]
        result = CliRunner().invoke(cli, argv, catch_exceptions=False)
        assert result.exit_code == 0, f"tsctl {' '.join(args)}: {result.output}"
        return json.loads(result.stdout) if as_json else result.stdout
    return run


def test_task_verbs(tsctl, cluster):
    text = tsctl("submit", "cli_job", "--payload", '{"n": 1}', "--tenant", "acme",
                 "--priority", "2", "--delay", "3600")
    task_id, state = text.split()[:2]
    assert state == "pending"
    shown = tsctl("get", task_id, as_json=True)
    assert (shown["payload"], shown["tenant"], shown["priority"]) == ({"n": 1}, "acme", 2)
    assert "cli_job" in tsctl("get", task_id)
    listed = tsctl("list", "--tenant", "acme", "--type", "cli_job", as_json=True)
    assert [t["task_id"] for t in listed] == [task_id]
    table = tsctl("list", "--tenant", "acme", "--state", "pending")
    assert table.splitlines()[0].split()[:4] == ["TASK_ID", "TYPE", "TENANT", "STATE"]
    assert task_id in table
    assert tsctl("cancel", task_id, as_json=True)["state"] == "cancelled"


def test_dead_letter_verbs(tsctl, cluster):
    with Client(cluster.urls) as c:
        task_id = c.submit("cli_dlq", max_retries=0)["task_id"]
        claimed = c.claim("cli-test", ["cli_dlq"], wait_s=5)
        assert [t["task_id"] for t in claimed] == [task_id]
        c.fail(task_id, claimed[0]["fencing_token"], "broken", retryable=False)
    assert task_id in tsctl("dlq", "list")
    assert tsctl("dlq", "replay", task_id, as_json=True)["state"] == "pending"
    with Client(cluster.urls) as c:
        token = c.claim("cli-test", ["cli_dlq"], wait_s=5)[0]["fencing_token"]
        c.fail(task_id, token, "broken again", retryable=False)
    assert [t["task_id"] for t in tsctl("dlq", "list", as_json=True)
            if t["task_id"] == task_id] == [task_id]
    tsctl("dlq", "discard", task_id)
    assert task_id not in tsctl("dlq", "list")


def test_schedule_verbs(tsctl):
    put = tsctl("schedules", "put", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Paris",
                "--task-type", "report", "--payload", '{"k": 1}', as_json=True)
    assert put["schedule_id"] == "nightly" and put["next_fire_at"]
    assert "nightly" in tsctl("schedules", "list")
    assert tsctl("schedules", "get", "nightly", as_json=True)["timezone"] == "Europe/Paris"
    assert tsctl("schedules", "pause", "nightly", as_json=True)["paused"] is True
    assert tsctl("schedules", "resume", "nightly", as_json=True)["paused"] is False
    tsctl("schedules", "trigger", "nightly")
    tsctl("schedules", "delete", "nightly")
    fires = tsctl("schedules", "preview", "0 3 * * *", "--tz", "Europe/Paris", "--count", "3",
                  as_json=True)["fires"]
    assert len(fires) == 3 and all("T03:00:00+0" in f for f in fires)
    assert len(tsctl("schedules", "preview", "*/5 * * * *").split()) == 5


def test_tenant_and_cluster_verbs(tsctl, cluster):
    view = tsctl("tenants", "set", "acme2", "--max-running", "3", "--weight", "2", as_json=True)
    assert (view["max_running"], view["weight"]) == (3, 2)
    assert "acme2" in tsctl("tenants", "list")
    status = tsctl("cluster", "status", as_json=True)
    assert status["leader"] in cluster.ids and len(status["nodes"]) == 3
    assert "leader:" in tsctl("cluster", "status")
    before = cluster.wait_leader()
    target = cluster.followers(before)[0]
    assert "transfer requested" in tsctl("cluster", "transfer", "--to", target)
    cluster.wait_leader()


def test_api_error_exit_1_against_the_cluster(cluster):
    result = CliRunner().invoke(cli, ["--url", cluster.urls[0], "get", "no-such-task"])
    assert result.exit_code == 1 and "not_found" in result.output
    result = CliRunner().invoke(cli, ["--url", cluster.urls[0], "schedules", "preview",
                                      "0 0 30 2 *"])
    assert result.exit_code == 1 and "invalid_argument" in result.output


def test_bulk_submit_and_wait_for_a_worker(tsctl, cluster, tmp_path):
    import threading

    from tsched.client import Worker
    lines = tmp_path / "tasks.jsonl"
    lines.write_text("".join(json.dumps({"task_type": "cli_bulk", "payload": {"n": n}}) + "\n"
                             for n in range(120)))
    done = tsctl("submit", "--file", str(lines), "--tenant", "bulk", as_json=True)
    assert len(done) == 120 and len({t["task_id"] for t in done}) == 120
    listed = tsctl("list", "--tenant", "bulk", "--limit", "500", as_json=True)
    assert sorted(t["payload"]["n"] for t in listed) == list(range(120))
    worker = Worker(cluster.urls, {"cli_wait": lambda p, ctx: {"echo": p}}, wait_s=1)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        task_id = tsctl("submit", "cli_wait", "--payload", "7").split()[0]
        waited = tsctl("get", task_id, "--wait", "--wait-timeout", "60", as_json=True)
    finally:
        worker.stop()
        thread.join(30)
    assert waited["state"] == "completed" and waited["result"] == {"echo": 7}


def test_tsctl_on_a_follower_prints_the_leaders_hint_and_does_without_it(cluster):
    """Only the leader sees the claims, so a follower's answer leaves `unclaimed_type` out:
    tsctl, given that follower alone, asks through it for the leader's answer
    (`consistency=linearizable`, relayed) and prints the hint. A follower that can reach
    no leader still shows the task, without the hint (the leader's read gives up after
    a few seconds) from its own replica, saying so, and a write sent to it fails as
    unavailable (exit 3), naming the request."""
    leader = cluster.wait_leader()
    follower, other = cluster.followers(leader)

    def tsctl(*args: str, code: int = 0):
        result = CliRunner().invoke(cli, ["--url", cluster.url(follower), *args])
        assert result.exit_code == code, f"tsctl {' '.join(args)}: {result.output}"
        return result

    task_id = tsctl("submit", "nobody_serves", "--delay", "3600").stdout.split()[0]
    status, own = cluster.call(follower, "GET", f"/v1/tasks/{task_id}")
    assert status == 200 and "unclaimed_type" not in own
    hint = f"hint: no worker has asked for task type 'nobody_serves' in the last {HINT_WINDOW_S} s"
    # once the leader has watched its term for a whole window; `get` shows the hint in the
    # task's detail, `submit` after its one line, on stderr
    wait_until(lambda: hint in tsctl("get", task_id).stdout, DEADLINE_S, "the leader's hint")
    assert hint in tsctl("submit", "nobody_serves", "--delay", "3600").stderr

    for node in (leader, other):      # SIGSTOP: no leader, and no quorum to elect one
        cluster.pause(node)
    try:
        shown = tsctl("get", task_id)
        refused = tsctl("--timeout", "1", "submit", "nobody_serves", code=3)
    finally:
        for node in (leader, other):
            cluster.resume(node)
    assert task_id in shown.stdout and "hint:" not in shown.output
    assert "note: no leader answered" in shown.stderr and "may lag" in shown.stderr
    assert "error: unavailable: no node answered POST /v1/tasks" in refused.stderr
