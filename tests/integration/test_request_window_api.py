"""The request window over HTTP: a timed Idempotency-Key (`tsched1-<ms>-<nonce>`, what the
client sends) is applied once while it is young, and refused `request_expired` (409) once
it is older than `request_window_s`, never applied again; one far ahead of the cluster's
clock is refused as invalid."""
from __future__ import annotations

import time
import uuid

import pytest

pytestmark = pytest.mark.slow
WINDOW_S = 120          # Limits' default request_window_ms
AHEAD_S_MAX = 30        # Limits' default request_ahead_ms_max


def _key(at_s: float) -> str:
    return f"tsched1-{int(at_s * 1000)}-{uuid.uuid4().hex}"


def test_a_young_timed_key_is_applied_once(cluster):
    leader = cluster.wait_leader()
    headers = {"Idempotency-Key": _key(time.time())}
    body = {"task_type": "window", "payload": {"n": 1}}
    s1, first = cluster.call(leader, "POST", "/v1/tasks", body, headers=headers)
    s2, again = cluster.call(cluster.followers(leader)[0], "POST", "/v1/tasks", body,
                             headers=headers)
    assert (s1, s2) == (201, 201), (s1, s2, again)   # the first answer, again
    assert again["task_id"] == first["task_id"]


def test_a_key_older_than_the_window_is_refused_not_applied(cluster):
    leader = cluster.wait_leader()
    headers = {"Idempotency-Key": _key(time.time() - WINDOW_S - 60)}
    status, body = cluster.call(leader, "POST", "/v1/tasks",
                                {"task_type": "expired", "payload": {}}, headers=headers)
    assert status == 409, body
    assert body["error"]["code"] == "request_expired"
    status, listed = cluster.call(leader, "GET", "/v1/tasks?task_type=expired")
    assert status == 200 and listed["tasks"] == []


def test_a_key_far_ahead_of_the_clock_is_refused(cluster):
    leader = cluster.wait_leader()
    headers = {"Idempotency-Key": _key(time.time() + AHEAD_S_MAX + 600)}
    status, body = cluster.call(leader, "POST", "/v1/tasks",
                                {"task_type": "ahead", "payload": {}}, headers=headers)
    assert status == 400, body
    assert body["error"]["code"] == "invalid_argument"
