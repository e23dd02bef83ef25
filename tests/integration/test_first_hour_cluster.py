"""What a newcomer meets against a real 3-node cluster: `--json` after the verb, the digest
column of `tsctl cluster status`, a running cap of 0 shown as none, an archive without
[archive], the hints for a URL whose base is wrong and for https against a plain node, the
worker's log of what follows a failure, tracebacks that start in the user's code, and
tsworker naming the schedule a node refused."""
from __future__ import annotations

import json
import logging
import re

import pytest
from click.testing import CliRunner

from tsched.client import App, Client, NonRetryable, Worker
from tsched.client.cli import cli
from tsched.client.tsworker import cli as tsworker_cli

from tests.harness.waits import wait_until
from tests.integration.worker_support import DEADLINE_S, running

pytestmark = pytest.mark.slow
FAST_RETRY = {"backoff": "fixed", "base_s": 0.1, "max_s": 0.1, "jitter": 0}
OWN_FRAMES = ("_threads.py", "_worker.py", "_appcall.py", "_jobs.py")


@pytest.fixture
def tsctl(cluster):
    url = ",".join(cluster.urls)

    def run(*args: str, code: int = 0, url: str = url):
        result = CliRunner().invoke(cli, ["--url", url, *args])
        assert result.exit_code == code, f"tsctl {' '.join(args)}: {result.output}"
        return result.output
    return run


def test_json_after_the_verb(tsctl):
    task = json.loads(tsctl("submit", "newcomer_job", "--delay", "3600", "--json"))
    assert task["state"] == "pending"
    assert json.loads(tsctl("get", task["task_id"], "--json"))["task_id"] == task["task_id"]
    listed = json.loads(tsctl("list", "--type", "newcomer_job", "--json"))
    assert [t["task_id"] for t in listed] == [task["task_id"]]
    assert json.loads(tsctl("cancel", task["task_id"], "--json"))["state"] == "cancelled"
    assert isinstance(json.loads(tsctl("schedules", "list", "--json")), list)
    assert json.loads(tsctl("cluster", "status", "--json"))["leader"]


def test_cluster_status_shows_each_replicas_digest_and_lag(tsctl):
    nodes = json.loads(tsctl("--json", "cluster", "status"))["nodes"]
    lines = tsctl("cluster", "status").splitlines()
    head = lines[1].split()
    assert "DIGEST" in head
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    top = max(n["applied_seq"] for n in nodes)
    for node in nodes:
        row = rows[node["id"]]
        assert row[head.index("DIGEST")] == node["digest"][:12]
        assert row[head.index("APPLIED_SEQ")] == str(node["applied_seq"])
        assert row[head.index("LAG")] == str(top - node["applied_seq"])   # as the dashboard


def test_a_tenant_without_a_running_cap_shows_none(tsctl):
    assert "none" in tsctl("tenants", "set", "uncapped", "--weight", "2").split()
    rows = [line.split() for line in tsctl("tenants", "list").splitlines()]
    assert ["uncapped", "none", "2"] == next(r for r in rows if r[0] == "uncapped")[:3]
    shown = json.loads(tsctl("tenants", "list", "--json"))
    assert next(t for t in shown if t["tenant"] == "uncapped")["max_running"] == 0


def test_a_node_without_an_archive_table_archives(tsctl, cluster):
    # no [archive] in the cluster file: each node archives under its data_dir
    assert tsctl("archive", "search", "--tenant", "default", "--json") == ""
    assert (cluster.data_dir(cluster.ids[0]) / "archive").is_dir()


def test_a_wrong_base_url_is_named(tsctl, cluster):
    out = tsctl("list", code=1, url=cluster.url("n1") + "/tsched")
    assert "not_found" in out and "TSCTL_URL" in out and "without /v1" in out


def test_https_against_a_plain_node_says_it_may_speak_http(tsctl, cluster):
    url = cluster.url("n1").replace("http://", "https://")
    out = tsctl("--timeout", "60", "list", code=3, url=url)
    assert "plain http" in out and "TSCTL_URL" in out


def _worker_log(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "tsched.worker")


def test_worker_says_what_follows_a_failure_and_reports_the_users_frames(cluster, caplog):
    caplog.set_level(logging.INFO, logger="tsched.worker")
    app = App(cluster.urls)

    @app.task(name="newcomer_boom", max_retries=1, retry=FAST_RETRY)
    def boom() -> None:
        raise RuntimeError("boom")

    @app.task(name="newcomer_refuse", max_retries=3, retry=FAST_RETRY)
    def refuse() -> None:
        raise NonRetryable("bad input")
    with app:
        boom_id, refuse_id = boom.submit().task_id, refuse.submit().task_id
        handlers = {t.name: t.handler() for t in (boom, refuse)}
        with running(Worker(cluster.urls, handlers, wait_s=1)):
            wait_until(lambda: f"task {refuse_id}: dead-lettered" in _worker_log(caplog)
                       and f"task {boom_id}: dead-lettered" in _worker_log(caplog),
                       DEADLINE_S, "two dead letters in the worker's log")
    text = _worker_log(caplog)
    assert f"task {boom_id} attempt 1 of 2 failed: RuntimeError('boom')" in text
    retry = re.search(rf"task {boom_id}: retry 1 of 1 in (\S+) s$", text, re.M)
    assert retry and 0 <= float(retry.group(1)) <= 0.1, text   # the 0.1 s backoff's rest
    assert f"task {boom_id}: dead-lettered after attempt 2 of 2: no retries left" in text
    assert f"task {refuse_id}: dead-lettered after attempt 1 of 4: not retryable" in text
    with Client(cluster.urls) as client:
        trace = client.get(boom_id)["attempts"][0]["error_detail"]["traceback"]
    frames = [line for line in trace.splitlines() if line.strip().startswith("File ")]
    assert frames and __file__ in frames[0], trace          # the user's frame comes first
    assert not any(name in trace for name in OWN_FRAMES), trace
    assert trace.rstrip().endswith("RuntimeError: boom")


def test_tsworker_names_the_schedule_a_node_refused(cluster, tmp_path, monkeypatch):
    (tmp_path / "jittery_tasks.py").write_text(
        "from tsched.client import App\n"
        "app = App()\n"
        "@app.periodic('0 2 * * *', id='too-jittery', jitter_s=10 ** 6)\n"
        "def nightly() -> None: ...\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TSCTL_URL", ",".join(cluster.urls))
    result = CliRunner().invoke(tsworker_cli, ["jittery_tasks"])
    assert result.exit_code == 1, result.output
    assert "invalid_argument" in result.output and "schedule 'too-jittery'" in result.output
