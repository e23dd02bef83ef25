"""Rendering state objects as API JSON (node/present.py): its caches never change an answer."""
from __future__ import annotations

import datetime as dt

import orjson

from tsched.node import present
from tsched.node.api.validate import json_text
from tsched.statemachine import commands as c

from tests.unit.statemachine.sm_support import T0, Driver


def _plain_rfc3339(ms: int) -> str:
    t = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def test_instants_render_the_same_from_the_cache_and_after_it_is_emptied():
    instants = [T0 + 7 * i for i in range(present._INSTANTS_CACHED_MAX + 50)]
    first = [present.rfc3339(ms) for ms in instants]       # fills the cache past its bound
    again = [present.rfc3339(ms) for ms in reversed(instants)]
    assert first == [_plain_rfc3339(ms) for ms in instants]
    assert again == first[::-1]
    assert len(present._instant) <= present._INSTANTS_CACHED_MAX
    assert present.rfc3339(None) is None and present.rfc3339(0) == "1970-01-01T00:00:00.000Z"


def test_retry_policies_render_by_their_fields_and_a_rendering_is_the_callers_own():
    a = c.RetryPolicy(backoff="fixed", base_ms=2_000, max_ms=2_000, jitter_permille=0)
    b = c.RetryPolicy(backoff="linear", base_ms=1_500, max_ms=60_000, multiplier_milli=1_000)
    shown = present.retry(a)
    assert shown == {"backoff": "fixed", "base_s": 2, "max_s": 2, "multiplier": 2.0,
                     "jitter": 0.0}
    shown["backoff"] = "changed by a caller"
    assert present.retry(a)["backoff"] == "fixed"
    assert present.retry(b) == {"backoff": "linear", "base_s": 1.5, "max_s": 60, "multiplier": 1.0,
                                "jitter": 0.1}


def test_a_task_answer_carries_payload_and_result_as_the_json_values_given():
    d = Driver()
    payload = {"z": [1, 2.5, None], "a": {"y": "é", "b": True}}
    d.add("t1", payload_json=json_text(payload, "payload"))
    claimed = d.ok(c.Claim, worker_id="w", task_types=("email",), max_tasks=1, lease_ms=30_000)
    (task,) = claimed["tasks"]
    done = d.ok(c.Complete, task_id="t1", fencing_token=task.fencing_token,
                result_json=json_text({"ok": [1, {"k": "v"}]}, "result"))
    shown = orjson.loads(orjson.dumps(present.task(done["task"])))
    assert shown["payload"] == payload and shown["result"] == {"ok": [1, {"k": "v"}]}
    assert shown["state"] == "completed" and shown["completed_at"] == _plain_rfc3339(T0)
    assert shown["attempts"][0]["error"] is None and shown["attempts"][0]["outcome"] == "completed"


def test_a_minimal_claim_answer_is_the_whole_tasks_worker_fields_as_the_contract_names_them():
    from tsched.node.api.openapi import CLAIMED_FIELDS
    d = Driver()
    d.add("t1", payload_json=json_text({"n": 1}, "payload"))
    cmd = c.Claim(request_id="r1", now_ms=T0, worker_id="w", task_types=("email",),
                  max_tasks=1, lease_ms=30_000, prefetch_ms=0, tenant=None)
    res = d.sm.apply(cmd)
    (brief,) = orjson.loads(orjson.dumps(present.minimal_result(cmd, res)))
    (whole,) = orjson.loads(orjson.dumps(present.result(cmd, res)))
    assert tuple(brief) == CLAIMED_FIELDS
    assert brief == {k: whole[k] for k in CLAIMED_FIELDS}
    assert brief["payload"] == {"n": 1} and brief["worker_id"] == "w" and brief["attempt"] == 1


def test_a_minimal_failure_answer_says_when_a_retry_runs_and_fits_its_schema():
    """`next_retry_at` (the task's run_at, as the whole answer shows it) on a failure that
    left the task retrying only: not on a dead letter, a completion or a submit."""
    from tsched.node.api.openapi.document import components
    allowed = set(components()["MinimalTask"]["properties"])
    d = Driver()
    retry = c.RetryPolicy(backoff="fixed", base_ms=30_000, max_ms=30_000, jitter_permille=0)
    d.add("t1", max_retries=1, retry=retry)
    briefs = []
    for attempt in (1, 2):
        claim = d.ok(c.Claim, worker_id="w", task_types=("email",), max_tasks=1,
                     lease_ms=30_000, now_ms=T0 + (attempt - 1) * 30_000)
        (task,) = claim["tasks"]
        cmd = c.Fail(request_id=f"f{attempt}", now_ms=T0 + (attempt - 1) * 30_000,
                     task_id="t1", fencing_token=task.fencing_token, error="boom",
                     retryable=True)
        res = d.sm.apply(cmd)
        brief = orjson.loads(orjson.dumps(present.minimal_result(cmd, res)))
        whole = orjson.loads(orjson.dumps(present.result(cmd, res)))
        assert set(brief) <= allowed, brief
        briefs.append((brief, whole))
    (first, first_whole), (last, _) = briefs
    assert first["state"] == "pending" and first["next_retry_at"] == first_whole["next_retry_at"]
    assert first["next_retry_at"] == _plain_rfc3339(T0 + 30_000)
    assert last == {"task_id": "t1", "state": "dead_letter"}
