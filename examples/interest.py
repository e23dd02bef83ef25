"""Nightly interest, credited once per night even when the handler runs twice.

tsched runs a handler at least once: a worker that commits and then dies before reporting
completion leaves the task to run again. `effect_once` records the run's `execution_id` in
the same transaction as the credit, so a second run of the same night finds the record and
credits nothing. Run it next to `tsctl dev`:

    cd examples && ../.venv/bin/tsworker interest --concurrency 2

The ledger is the SQLite file `interest.db` here (INTEREST_DB names another); with
PostgreSQL, pass a psycopg connection instead: the call is the same.
"""
from __future__ import annotations

import os
import sqlite3

from tsched.client import App, TaskContext, effect_once

URLS = os.environ.get(
    "TSCTL_URL", "http://127.0.0.1:8701,http://127.0.0.1:8702,http://127.0.0.1:8703")
DB = os.environ.get("INTEREST_DB", "interest.db")
RATE_PER_NIGHT = 0.0001

app = App(URLS)


def ledger() -> sqlite3.Connection:
    conn = sqlite3.connect(DB, timeout=30)
    conn.execute("CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, cents BIGINT)")
    conn.execute("INSERT OR IGNORE INTO accounts VALUES ('acme', 1000000)")
    conn.commit()
    return conn


@app.periodic("0 2 * * *", timezone="Europe/Berlin", id="nightly-interest")
def nightly_interest(ctx: TaskContext) -> dict[str, object]:
    conn = ledger()
    try:
        with conn:                                    # one transaction: credit and record
            if not effect_once(conn, ctx):
                return {"credited": False, "reason": "this night's interest is already credited"}
            (cents,) = conn.execute("SELECT cents FROM accounts WHERE id = 'acme'").fetchone()
            interest = round(cents * RATE_PER_NIGHT)
            conn.execute("UPDATE accounts SET cents = cents + ? WHERE id = 'acme'", (interest,))
        return {"credited": True, "cents": interest}
    finally:
        conn.close()
