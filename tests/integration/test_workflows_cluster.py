"""Workflows on one real 3-node cluster (DESIGN.md section 5.2), shared by the module:

- a batch of 200 steps and a callback that writes one row through `effect_once`, with a
  worker SIGKILLed mid-batch and the leader SIGKILLed mid-batch: the callback runs once,
  after all 200 completed, and `ctx.parents` holds their 200 results;
- "cancel" and "run" under a dead-lettered parent, and the replay that resumes;
- Celery's canvas (chain, group, chord) and `app.batch` run by a real Worker.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tsched.client import (App, AsyncApp, Client, ParentFailed, TaskContext, Worker, chain, chord,
                           group)
from tsched.client.effects import effect_once

from tests.harness.waits import wait_until

from .worker_support import DEADLINE_S, running

pytestmark = pytest.mark.slow

BATCH = 200
# Worker A, in a process of its own so that it can be SIGKILLed: it runs the batch's
# steps slowly enough to be killed in the middle of them.
WORKER_A = '''
import sys, time
from tsched.client import Worker
def item(payload, ctx):
    time.sleep(0.05)
    return {"i": payload["i"]}
Worker(sys.argv[1], {sys.argv[2]: item}, lease_s=2, wait_s=1, concurrency=4).run()
'''


def _item(payload, ctx: TaskContext):
    time.sleep(0.02)   # the work: the batch lasts long enough to kill the leader within it
    return {"i": payload["i"]}


def _callback(db: str):
    def done(payload, ctx: TaskContext):
        parents = ctx.parents
        failed = [n for n, r in parents.items() if isinstance(r, ParentFailed)]
        conn = sqlite3.connect(db, timeout=30)
        try:
            applied = effect_once(conn, ctx)
            if applied:
                conn.execute("INSERT INTO summary VALUES (?, ?)",
                             (len(parents), sum(r["i"] for r in parents.values()
                                                if not isinstance(r, ParentFailed))))
            conn.commit()
        finally:
            conn.close()
        return {"parents": len(parents), "failed": failed, "applied": applied}
    return done


def _counts(client: Client, wid: str) -> dict:
    return client.get_workflow(wid)["counts"]


def _kill_worker(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_a_batch_and_its_callback_survive_a_worker_and_the_leader_killed(cluster,
                                                                         tmp_path: Path):
    db = str(tmp_path / "summary.db")
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE summary (parents INTEGER, total INTEGER)")
    steps = [{"name": f"item-{i}", "task_type": "wfb_item", "payload": {"i": i},
              "max_retries": 5} for i in range(BATCH)]
    steps.append({"name": "done", "task_type": "wfb_done", "payload": {},
                  "deps": [s["name"] for s in steps]})
    with Client(cluster.urls, timeout_s=30) as client:
        wid = client.submit_workflow(steps, tenant="bank")["workflow_id"]
        proc = subprocess.Popen([sys.executable, "-c", WORKER_A, ",".join(cluster.urls),
                                 "wfb_item"], start_new_session=True)
        try:
            wait_until(lambda: _counts(client, wid).get("completed", 0) >= 30, DEADLINE_S,
                       "worker A's first completions")
        finally:
            _kill_worker(proc)                       # mid-batch, holding leases
        handlers = {"wfb_item": _item, "wfb_done": _callback(db)}
        with running(Worker(cluster.urls, handlers, wait_s=1, lease_s=5, concurrency=2)):
            wait_until(lambda: _counts(client, wid).get("completed", 0) >= 100, DEADLINE_S,
                       "half the batch")
            leader = cluster.wait_leader()
            before = client.get_workflow(wid)
            cluster.kill(leader)                     # mid-batch too
            assert before["state"] == "running" and before["counts"].get("waiting") == 1
            cluster.wait_leader(exclude=(leader,))
            cluster.start_node(leader)
            wait_until(lambda: client.get_workflow(wid)["state"] != "running", DEADLINE_S * 2,
                       "the workflow to finish")
        wf = client.get_workflow(wid)
    assert wf["state"] == "completed", wf["counts"]
    assert wf["counts"] == {"completed": BATCH + 1}
    done = wf["steps"][-1]
    assert done["result"]["parents"] == BATCH and done["result"]["failed"] == []
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT parents, total FROM summary").fetchall() == \
            [(BATCH, sum(range(BATCH)))]                       # written once


def test_cancel_and_run_under_a_dead_letter_and_the_replay_that_resumes(cluster):
    steps = [{"name": "p", "task_type": "wfc_p", "max_retries": 0},
             {"name": "c1", "task_type": "wfc_c", "deps": ["p"]},
             {"name": "c2", "task_type": "wfc_c", "deps": ["c1"]},
             {"name": "r", "task_type": "wfc_r", "deps": ["p"], "on_parent_failure": "run"}]
    with Client(cluster.urls, timeout_s=30) as client:
        wf = client.submit_workflow(steps, tenant="rules")
        wid = wf["workflow_id"]
        (task,) = client.claim("w", ["wfc_p"], wait_s=5)
        client.fail(task["task_id"], task["fencing_token"], "boom", retryable=False)
        got = {s["name"]: s for s in client.get_workflow(wid)["steps"]}
        assert {n: s["state"] for n, s in got.items()} == {
            "p": "dead_letter", "c1": "cancelled", "c2": "cancelled", "r": "pending"}
        assert got["c2"]["cancelled_by"] == "parent"
        (seen,) = client.claim("w", ["wfc_r"], wait_s=5)
        parents = client.parents(seen["task_id"])["parents"]
        assert parents["p"]["state"] == "dead_letter" and parents["p"]["error"] == "boom"
        client.replay(task["task_id"])               # c1 and c2 resume waiting
        assert {s["name"]: s["state"] for s in client.get_workflow(wid)["steps"]} == {
            "p": "pending", "c1": "waiting", "c2": "waiting", "r": "running"}
        (again,) = client.claim("w", ["wfc_p"], wait_s=5)
        client.complete(again["task_id"], again["fencing_token"], {"ok": True})
        (c1,) = client.claim("w", ["wfc_c"], wait_s=5)
        assert c1["task_id"] == got["c1"]["task_id"]


app = App()


@app.task(name="wf_add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="wf_tsum")
def tsum(values: list) -> int:
    return sum(values)


@app.task(name="wf_count")
def count(ctx: TaskContext) -> dict:
    return {"parents": len(ctx.parents), "sum": sum(ctx.parents.values())}


def test_chain_group_chord_and_batch_on_the_cluster(cluster):
    app.configure(urls=",".join(cluster.urls))
    handlers = {t.name: t.handler() for t in app.tasks.values()}
    with running(Worker(cluster.urls, handlers, wait_s=1)):
        assert chain(add.s(2, 2), add.s(4), add.s(8)).apply_async().get(DEADLINE_S) == 16
        assert group(add.s(i, i) for i in range(5)).apply_async().get(DEADLINE_S) == \
            [0, 2, 4, 6, 8]
        assert chord((add.s(i, i) for i in range(5)), tsum.s()).apply_async() \
            .get(DEADLINE_S) == 20
        handle = app.batch([add.s(i, 1) for i in range(10)], then=count.s())
        assert handle.get(DEADLINE_S) == {"parents": 10, "sum": 55}
    app.close()


def test_tsctl_workflows_list_get_and_cancel(cluster):
    from click.testing import CliRunner

    from tsched.client.cli import cli
    url = ",".join(cluster.urls)
    steps = [{"name": "one", "task_type": "wfcli"},
             {"name": "two", "task_type": "wfcli", "deps": ["one"]}]
    with Client(cluster.urls, timeout_s=30) as client:
        wid = client.submit_workflow(steps, tenant="cli")["workflow_id"]

    def run(*args: str):
        result = CliRunner().invoke(cli, ["--url", url, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output
    listed = run("workflows", "list", "--tenant", "cli", "--state", "running").splitlines()
    assert listed[0].split()[:3] == ["WORKFLOW_ID", "TENANT", "STATE"]
    assert listed[1].split()[:4] == [wid, "cli", "running", "2"]
    shown = run("workflows", "get", wid)
    assert "pending=1  waiting=1" in shown and "two" in shown and "one" in shown
    assert run("workflows", "cancel", wid).split() == [wid, "cancelled"]
    as_json = json.loads(run("--json", "workflows", "get", wid))
    assert [s["cancelled_by"] for s in as_json["steps"]] == [None, "workflow"]
    result = CliRunner().invoke(cli, ["--url", url, "workflows", "cancel", wid])
    assert result.exit_code == 1 and "invalid_state" in result.output


aapp = AsyncApp()


@aapp.task(name="wf_amul")
async def amul(x: int, y: int) -> int:
    return x * y


@aapp.task(name="wf_asum")
def asum(values: list) -> int:
    return sum(values)


def test_the_canvas_of_an_async_app_is_awaited(cluster):
    aapp.configure(urls=",".join(cluster.urls))
    handlers = {t.name: t.handler() for t in aapp.tasks.values()}

    async def run() -> tuple:
        handle = await chord([amul.s(i, 2) for i in range(4)], asum.s()).apply_async()
        batch = await aapp.batch([amul.s(i, 3) for i in range(3)])
        out = await handle.get(DEADLINE_S), await batch.get(DEADLINE_S)
        await aapp.aclose()
        return out
    with running(Worker(cluster.urls, handlers, wait_s=1)):
        assert asyncio.run(run()) == (12, [0, 3, 6])
