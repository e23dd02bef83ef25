"""A snapshot written by the state machine of commit 3483ebd (format 3, stored bytes) still
restores to the same state: same digest, same bytes when written again, and the same
digest and answers after the same further commands (stored/snapshot_v3_make.py made both)."""
from __future__ import annotations

import json
import pathlib
import sys
from collections import Counter

from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c

DATA = pathlib.Path(__file__).parent / "stored"
sys.path.insert(0, str(DATA))
from snapshot_v3_make import NAME, continuation  # noqa: E402

BLOB = (DATA / f"{NAME}.bin").read_bytes()
EXPECTED = json.loads((DATA / f"{NAME}.json").read_text())


def test_stored_snapshot_restores_with_its_digest_and_bytes() -> None:
    sm = StateMachine.restore(BLOB)
    assert sm.seq == EXPECTED["seq"] and len(sm.tasks) == EXPECTED["tasks"]
    assert sm.digest() == EXPECTED["digest"] == sm._full_digest()
    assert sm.snapshot() == BLOB
    states = Counter(t.state for t in sm.tasks.values())
    assert set(states) == {"pending", "running", "completed", "cancelled", "dead_letter"}


def test_stored_snapshot_continues_as_the_writer_did() -> None:
    sm = StateMachine.restore(BLOB)
    results = sm.apply_batch(continuation())
    assert [r.code for r in results] == EXPECTED["continuation_codes"]
    assert results[1].value["tasks"], "the claim after the restore found work"
    assert results[3].value["duplicate"] is True   # the idempotency map was rebuilt
    assert len(sm.tasks) == EXPECTED["tasks_after"]
    assert sm.digest() == EXPECTED["digest_after"] == sm._full_digest()


def test_stored_snapshot_answers_repeated_requests_from_its_table() -> None:
    sm = StateMachine.restore(BLOB)
    again = sm.apply(c.SetTenant(request_id="r1", now_ms=sm.now_ms, tenant="beta", weight=9))
    assert again.ok and again.value["tenant"].tenant == "acme"   # r1 was SetTenant acme
    assert sm.tenants["beta"].weight != 9
