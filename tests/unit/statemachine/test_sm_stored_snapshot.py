"""A snapshot written by the state machine of commit 3483ebd (format 3, stored bytes) still
restores to the same state: same state digest (the value the writer's `digest()` gave:
format 3's digest was the state digest), the same state when written again (in format 4),
and the same state digest and answers after the same further commands
(stored/snapshot_v3_make.py made both). Its rolling digest is new: a format 3 snapshot
carries no roll, so the restored roll is the hash of the snapshot's bytes."""
from __future__ import annotations

import json
import pathlib
import sys
from collections import Counter

from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c
from tsched.statemachine.digest import roll_from_blob

DATA = pathlib.Path(__file__).parent / "stored"
sys.path.insert(0, str(DATA))
from snapshot_v3_make import NAME, continuation  # noqa: E402

BLOB = (DATA / f"{NAME}.bin").read_bytes()
EXPECTED = json.loads((DATA / f"{NAME}.json").read_text())


def test_stored_snapshot_restores_with_its_digest_and_bytes() -> None:
    sm = StateMachine.restore(BLOB)
    assert sm.seq == EXPECTED["seq"] and len(sm.tasks) == EXPECTED["tasks"]
    assert sm.state_digest() == EXPECTED["digest"]
    assert sm.roll == roll_from_blob(3, BLOB)
    again = StateMachine.restore(sm.snapshot())          # format 4 now
    assert again.state_digest() == EXPECTED["digest"] and again.digest() == sm.digest()
    assert again.snapshot() == sm.snapshot()
    states = Counter(t.state for t in sm.tasks.values())
    assert set(states) == {"pending", "running", "completed", "cancelled", "dead_letter"}


def test_stored_snapshot_continues_as_the_writer_did() -> None:
    sm = StateMachine.restore(BLOB)
    results = sm.apply_batch(continuation())
    assert [r.code for r in results] == EXPECTED["continuation_codes"]
    assert results[1].value["tasks"], "the claim after the restore found work"
    assert results[3].value["duplicate"] is True   # the idempotency map was rebuilt
    assert len(sm.tasks) == EXPECTED["tasks_after"]
    assert sm.state_digest() == EXPECTED["digest_after"]


def test_stored_snapshot_answers_repeated_requests_from_its_table() -> None:
    sm = StateMachine.restore(BLOB)
    again = sm.apply(c.SetTenant(request_id="r1", now_ms=sm.now_ms, tenant="beta", weight=9))
    assert again.ok and again.value["tenant"].tenant == "acme"   # r1 was SetTenant acme
    assert sm.tenants["beta"].weight != 9
