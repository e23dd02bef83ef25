"""A duplicate run that changes nothing, on a real cluster: worker A commits the effect and is
SIGKILLed before it reports completion; after A's lease runs out, worker B runs the task
again with the same execution id, `effect_once` says the effect is done, and B completes
the task without applying it again. On SQLite and on PostgreSQL."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.postgres_support import PostgresServer, unavailable_reason
from tsched.client import Client, Worker
from tsched.client.effects import effect_once

from tests.harness.waits import wait_until

from .worker_support import DEADLINE_S, running

pytestmark = pytest.mark.slow

# The handler, shared by both workers: credit the interest once per execution, then (worker
# A only) die by SIGKILL right after the commit, before the result can be reported.
HANDLER = '''
import os, signal, sqlite3
from tsched.client.effects import effect_once

def connect(db):
    if db.startswith("host="):
        import psycopg
        return psycopg.connect(db)
    return sqlite3.connect(db, timeout=30)

def credit(payload, ctx, die_after_commit=False):
    conn = connect(payload["db"])
    try:
        applied = effect_once(conn, ctx)
        if applied:
            conn.cursor().execute("UPDATE accounts SET balance = balance + 50 WHERE id = 1")
        conn.commit()
    finally:
        conn.close()
    if die_after_commit:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"applied": applied, "token": ctx.fencing_token}
'''
WORKER_A = HANDLER + '''
import sys
from tsched.client import Worker
Worker(sys.argv[1], {sys.argv[2]: lambda p, ctx: credit(p, ctx, die_after_commit=True)},
       lease_s=2, wait_s=1).run()
'''


def _handler_module() -> dict:
    namespace: dict = {}
    exec(compile(HANDLER, "effect_handler", "exec"), namespace)
    return namespace


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A connection string (a file path for SQLite, a DSN for PostgreSQL) of a fresh
    database holding one account with a balance of 1000."""
    if request.param == "sqlite":
        path = str(tmp_path / "bank.db")
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance BIGINT)")
            conn.execute("INSERT INTO accounts VALUES (1, 1000)")
        yield path
        return
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    import psycopg
    with PostgresServer() as pg:
        with psycopg.connect(pg.dsn) as conn:
            conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance BIGINT)")
            conn.execute("INSERT INTO accounts VALUES (1, 1000)")
        yield pg.dsn


def _query(db: str, sql: str) -> list[tuple]:
    conn = _handler_module()["connect"](db)
    try:
        cur = conn.cursor()
        cur.execute(sql)
        return [tuple(r) for r in cur.fetchall()]
    finally:
        conn.close()


def test_a_rerun_after_a_crash_after_commit_changes_nothing(cluster, database: str,
                                                          request: pytest.FixtureRequest) -> None:
    # A task type of this test's own: the module's cluster outlives the other case's workers.
    task_type = f"credit_{request.node.callspec.id}"
    with Client(cluster.urls, timeout_s=30) as client:
        task_id = client.submit(task_type, {"db": database})["task_id"]
        proc = subprocess.Popen([sys.executable, "-c", WORKER_A, ",".join(cluster.urls),
                                 task_type], start_new_session=True)
        try:
            assert proc.wait(60) == -signal.SIGKILL      # A died right after its commit
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        assert _query(database, "SELECT balance FROM accounts") == [(1050,)]
        credit = _handler_module()["credit"]
        with running(Worker(cluster.urls, {task_type: credit}, wait_s=1)):
            wait_until(lambda: client.get(task_id)["state"] == "completed", DEADLINE_S, "B's rerun")
        task = client.get(task_id)
    assert [a["outcome"] for a in task["attempts"]] == ["lease_expired", "completed"], task["attempts"]
    assert task["result"]["applied"] is False
    assert _query(database, "SELECT balance FROM accounts") == [(1050,)]
    rows = _query(database, "SELECT execution_id, task_id, fencing_token FROM tsched_executions")
    assert len(rows) == 1 and rows[0][0] == task["execution_id"] and rows[0][1] == task_id
    assert rows[0][2] < task["result"]["token"]          # recorded by A, with A's token


def test_effect_once_is_exported_where_handlers_import_from() -> None:
    from tsched import client
    assert client.effect_once is effect_once
