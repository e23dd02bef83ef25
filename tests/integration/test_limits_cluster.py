"""The HTTP layer refuses what the state machine would refuse, before anything is proposed:
on a real cluster, requests over the bounds of statemachine/limits.py get a clear 4xx and no
node's applied sequence number or Raft commit index moves."""
from __future__ import annotations

import pytest

from tsched.statemachine.limits import LIMITS

pytestmark = pytest.mark.slow

DAY_S = 86_400
REFUSED = [
    ("POST", "/v1/tasks", {"task_type": "t", "payload": "x" * 100_000}, 413, "too_large"),
    ("POST", "/v1/tasks", {"task_type": "t", "delay_s": 400 * DAY_S}, 400, "invalid_argument"),
    ("POST", "/v1/tasks", {"task_type": "t", "run_at": 1_800_000_000 + 400 * DAY_S},
     400, "invalid_argument"),
    ("POST", "/v1/tasks", {"task_type": "t", "timeout_s": 0.5}, 400, "invalid_argument"),
    ("POST", "/v1/tasks", {"tasks": [{"task_type": "t"},
                                     {"task_type": "t", "payload": "x" * 100_000}]},
     413, "too_large"),
    ("POST", "/v1/claims", {"worker_id": "w", "task_types": [f"t{i}" for i in range(51)]},
     400, "invalid_argument"),
]


def _positions(cluster) -> dict[str, tuple[int, int]]:
    out = {}
    for node in cluster.ids:
        st = cluster.self_status(node)
        out[node] = (st["applied_seq"], st["commit_index"])
    return out


def test_requests_over_the_limits_are_refused_before_raft(cluster) -> None:
    assert 100_000 > LIMITS.payload_bytes_max and 51 > LIMITS.claim_task_types_max
    leader = cluster.wait_leader()
    status, body = cluster.call(leader, "POST", "/v1/tasks", {"task_type": "t"})
    assert status == 201, body
    cluster.wait_applied(body["applied_seq"])
    before = _positions(cluster)
    for node in (leader, *cluster.followers(leader)):
        for method, path, request, want_status, want_code in REFUSED:
            status, answer = cluster.call(node, method, path, request)
            assert (status, answer["error"]["code"]) == (want_status, want_code), answer
            assert answer["error"]["message"]
    assert _positions(cluster) == before


def test_bounds_at_the_limit_are_accepted(cluster) -> None:
    """The same fields at their bound: the HTTP layer does not refuse more than it must."""
    leader = cluster.wait_leader()
    status, body = cluster.call(leader, "POST", "/v1/tasks", {
        "task_type": "t", "payload": "x" * (LIMITS.payload_bytes_max - 2),
        "delay_s": LIMITS.run_at_ahead_ms_max // 1000, "timeout_s": 1})
    assert status == 201, body
    status, body = cluster.call(leader, "POST", "/v1/claims", {
        "worker_id": "w", "task_types": [f"t{i}" for i in range(LIMITS.claim_task_types_max)]})
    assert status == 200, body
