"""`effect_once` on real databases: SQLite files and a PostgreSQL server started here.

Each database gets the same scenarios: a second run of one execution changes nothing; a
rolled-back effect leaves no record, so the retry applies it; two runs of one execution at
the same time apply it once; a connection outside a transaction is refused."""
from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.postgres_support import PostgresServer, unavailable_reason
from tsched.client.effects import effect_once


@dataclass
class Ctx:
    execution_id: str
    task_id: str = "t-1"
    fencing_token: int = 1


Connect = Callable[[], Any]


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with PostgresServer() as pg:
        yield pg


@pytest.fixture(params=["sqlite", "postgres"])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Connect:
    """A function that opens a new connection to one fresh database holding `accounts`."""
    if request.param == "sqlite":
        path = tmp_path / "bank.db"
        def open_sqlite() -> Any:
            return sqlite3.connect(path, timeout=30)
        opener: Connect = open_sqlite
    else:
        import psycopg
        pg = request.getfixturevalue("postgres")
        name = f"db_{request.node.name.split('[')[0][-40:].lower()}"
        with psycopg.connect(pg.dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")
            admin.execute(f"CREATE DATABASE {name}")
        def open_pg() -> Any:
            return psycopg.connect(pg.dsn.replace("dbname=postgres", f"dbname={name}"))
        opener = open_pg
    conn = opener()
    cur = conn.cursor()
    cur.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance BIGINT NOT NULL)")
    cur.execute("INSERT INTO accounts VALUES (1, 1000)")
    conn.commit()
    conn.close()
    return opener


def credit_interest(conn: Any, ctx: Ctx) -> bool:
    """The handler's effect: the interest is credited only by the run that records it."""
    applied = effect_once(conn, ctx)
    if applied:
        conn.cursor().execute("UPDATE accounts SET balance = balance + 50 WHERE id = 1")
    return applied


def balance(connect: Connect) -> int:
    conn = connect()
    try:
        cur = conn.cursor()
        cur.execute("SELECT balance FROM accounts WHERE id = 1")
        return int(cur.fetchone()[0])
    finally:
        conn.close()


def records(connect: Connect) -> list[tuple[Any, ...]]:
    conn = connect()
    try:
        cur = conn.cursor()
        cur.execute("SELECT execution_id, task_id, fencing_token FROM tsched_executions "
                    "ORDER BY execution_id")
        return [tuple(row) for row in cur.fetchall()]
    finally:
        conn.close()


def run_committed(connect: Connect, ctx: Ctx) -> bool:
    conn = connect()
    try:
        applied = credit_interest(conn, ctx)
        conn.commit()
        return applied
    finally:
        conn.close()


def test_a_second_run_of_one_execution_changes_nothing(connect: Connect) -> None:
    assert run_committed(connect, Ctx("exec-1", fencing_token=7)) is True
    assert run_committed(connect, Ctx("exec-1", fencing_token=8)) is False   # the rerun
    assert balance(connect) == 1050
    assert records(connect) == [("exec-1", "t-1", 7)]
    assert run_committed(connect, Ctx("exec-2")) is True                    # another occurrence
    assert balance(connect) == 1100


def test_a_zombie_with_an_older_token_gets_false(connect: Connect) -> None:
    assert run_committed(connect, Ctx("exec-1", fencing_token=9)) is True
    assert run_committed(connect, Ctx("exec-1", fencing_token=3)) is False
    assert balance(connect) == 1050


def test_a_rolled_back_effect_is_applied_by_the_retry(connect: Connect) -> None:
    conn = connect()
    assert credit_interest(conn, Ctx("exec-1", fencing_token=1)) is True
    conn.rollback()                               # the handler failed after the effect
    conn.close()
    assert balance(connect) == 1000
    assert run_committed(connect, Ctx("exec-1", fencing_token=2)) is True
    assert balance(connect) == 1050
    assert records(connect) == [("exec-1", "t-1", 2)]


def test_two_concurrent_runs_of_one_execution_apply_it_once(connect: Connect) -> None:
    """Run A records and holds its transaction open; run B, started meanwhile, must wait
    for A and then skip, whatever the order in which they reached the database."""
    a = connect()
    assert credit_interest(a, Ctx("exec-1", fencing_token=1)) is True   # A's lock held
    outcome: dict[str, Any] = {}

    def run_b() -> None:
        b = connect()         # sqlite3 connections stay in the thread that made them
        try:
            outcome["b"] = credit_interest(b, Ctx("exec-1", fencing_token=2))
            b.commit()
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc
        finally:
            b.close()
    thread = threading.Thread(target=run_b)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive(), outcome             # B waits for A's transaction
    a.commit()
    thread.join(60)
    a.close()
    assert outcome.get("error") is None, outcome
    assert outcome["b"] is False
    assert balance(connect) == 1050


def test_a_connection_outside_a_transaction_is_refused(connect: Connect, tmp_path: Path) -> None:
    conn = connect()
    try:
        if isinstance(conn, sqlite3.Connection):
            conn.isolation_level = None           # sqlite3's autocommit mode
        else:
            conn.autocommit = True
        with pytest.raises(ValueError, match="transaction"):
            effect_once(conn, Ctx("exec-1"))
    finally:
        conn.close()
    assert balance(connect) == 1000


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db")
    with pytest.raises(ValueError, match="identifier"):
        effect_once(conn, Ctx("e"), table="x; DROP TABLE accounts")
    with pytest.raises(ValueError, match="execution_id"):
        effect_once(conn, Ctx(""))
    with pytest.raises(ValueError, match="supports"):
        effect_once(object(), Ctx("e"))
    conn.close()
