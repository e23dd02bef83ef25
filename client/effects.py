"""`effect_once`: a handler's effect on a database happens once, though the handler may run twice.

Theory of operation. tsched runs a handler at least once: a worker that commits its effect
and dies before it reports completion (or whose lease runs out first) leaves the task to be
claimed again, and the next run does the work again. Every run of one occurrence carries the
same `execution_id` (`ctx.execution_id`), so the effect can be made conditional on it: in the
same database transaction as the effect, record that this execution's effect is done, and
skip the effect when the record is already there.

    with conn:                                   # one transaction: the effect and its record
        if effect_once(conn, ctx):               # True: not applied before, recorded now
            conn.execute("UPDATE accounts SET balance = balance + ? WHERE id = ?", ...)
        # False: a previous run committed it; nothing to do (the record is not written again)

The record and the effect commit together or roll back together, so a run that rolled back
left no record and the retry applies the effect. Two runs of one execution at the same time
(a zombie worker and its successor) both insert the same primary key: the database makes the
second wait for the first transaction, then skips (it committed) or inserts (it rolled back).
A run whose fencing token is older than the one recorded is a zombie: it gets False too, like
any run after the record. The table (`tsched_executions` unless named otherwise) is created
if missing; it grows by one row per execution, and deleting rows older than the longest time
a task can be retried is the owner's business (`recorded_at` says when).

Connections: `sqlite3` and PostgreSQL through `psycopg` (3) or `psycopg2`. The connection
must be in a transaction, or about to open one implicitly (the drivers' default); one in
autocommit mode with no transaction open is refused with ValueError, since the record would
commit at once, apart from the effect.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

TABLE_DEFAULT = "tsched_executions"
# A plain or schema-qualified SQL identifier: interpolated into statements, so checked here.
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")
_EXECUTION_ID_CHARS_MAX = 200
# Postgres: concurrent CREATE TABLE IF NOT EXISTS can still collide on the catalog; one
# transaction-scoped advisory lock (an arbitrary constant of ours) serialises the creation.
_PG_CREATE_LOCK = 0x7473636865640001


class RunContext(Protocol):
    execution_id: str
    task_id: str
    fencing_token: int


@dataclass(frozen=True)
class _Dialect:
    name: str
    param: str             # the driver's placeholder
    time_type: str
    now: str


_SQLITE = _Dialect("sqlite", "?", "TEXT", "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")
_POSTGRES = _Dialect("postgres", "%s", "TIMESTAMPTZ", "now()")


def effect_once(conn: Any, ctx: RunContext, *, table: str = TABLE_DEFAULT) -> bool:
    """Record `ctx.execution_id` in `table` inside the caller's open transaction and return
    True, or return False (writing nothing) when that execution's effect is already
    recorded. Raises ValueError for a connection outside a transaction, a bad table name or
    a context without an execution id."""
    dialect = _dialect_of(conn)
    _check(conn, ctx, table, dialect)
    cur = conn.cursor()
    try:
        _ensure_table(cur, table, dialect)
        p = dialect.param
        cur.execute(
            f"INSERT INTO {table} (execution_id, task_id, fencing_token, recorded_at) "
            f"VALUES ({p}, {p}, {p}, {dialect.now}) ON CONFLICT (execution_id) DO NOTHING",
            (ctx.execution_id, ctx.task_id, int(ctx.fencing_token)))
        return cur.rowcount == 1
    finally:
        cur.close()


def _dialect_of(conn: Any) -> _Dialect:
    module = type(conn).__module__.split(".")[0]
    if module == "sqlite3":
        return _SQLITE
    if module in ("psycopg", "psycopg2"):
        return _POSTGRES
    raise ValueError(f"effect_once supports sqlite3, psycopg and psycopg2 connections, "
                     f"not {type(conn).__module__}.{type(conn).__name__}")


def _check(conn: Any, ctx: RunContext, table: str, dialect: _Dialect) -> None:
    if not _TABLE_NAME.match(table):
        raise ValueError(f"table must be an SQL identifier (optionally schema.name), not {table!r}")
    execution_id = getattr(ctx, "execution_id", None)
    if not isinstance(execution_id, str) or not execution_id:
        raise ValueError("ctx.execution_id must be a non-empty string (a TaskContext of a run)")
    if len(execution_id) > _EXECUTION_ID_CHARS_MAX:
        raise ValueError(f"ctx.execution_id is longer than {_EXECUTION_ID_CHARS_MAX} characters")
    if not _in_transaction(conn, dialect):
        raise ValueError("effect_once needs a connection in a transaction: this one is in "
                         "autocommit mode with no transaction open, so the record would "
                         "commit apart from the effect (open one: BEGIN, or turn autocommit off)")


def _in_transaction(conn: Any, dialect: _Dialect) -> bool:
    """In a transaction, or one opens implicitly at the next statement (the drivers'
    default mode): either way the record commits with what follows."""
    if dialect is _SQLITE:
        autocommit = getattr(conn, "autocommit", None)   # Python 3.12+: True, False or -1
        if autocommit is False:
            return True            # PEP 249 mode: always in a transaction
        if autocommit is True:
            return conn.in_transaction
        return conn.in_transaction or conn.isolation_level is not None
    if not conn.autocommit:
        return True
    if type(conn).__module__.startswith("psycopg2"):
        import psycopg2.extensions as ext
        return conn.get_transaction_status() != ext.TRANSACTION_STATUS_IDLE
    import psycopg
    return conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE


def _ensure_table(cur: Any, table: str, dialect: _Dialect) -> None:
    if dialect is _POSTGRES:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))
        if cur.fetchone()[0]:
            return
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_CREATE_LOCK,))
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {table} ("
        "execution_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, "
        f"fencing_token BIGINT NOT NULL, recorded_at {dialect.time_type} NOT NULL)")
