"""The audit trail on a real 3-node cluster with [auth] and [archive] (DESIGN 14.6).

A cancel by a tenant token, a schedule put and a replay by the admin token are read back
from GET /v1/audit with their actors; the entries are in the replicated state, so they
survive a SIGKILL of the leader and are read from the new one; a leadership transfer is
recorded through its audit note; with a small `audit_entries_max`, the evicted entries
appear in every live node's `audit-YYYY-MM-DD.jsonl.gz` archive files."""
from __future__ import annotations

import gzip
import hashlib
import json
import uuid

import pytest

from tests.harness.cluster import running
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ADMIN, ACME = (f"tok-{n}-{uuid.uuid4().hex}" for n in ("admin", "acme"))
AUDIT_MAX = 4


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


TOML = f"""
[auth]
admin_token_sha256 = ["{sha(ADMIN)}"]
[auth.tenant_token_sha256]
acme = ["{sha(ACME)}"]

[archive]
dir = "archive"

[limits]
audit_entries_max = {AUDIT_MAX}
"""


@pytest.fixture
def audited(tmp_path):
    yield from running(tmp_path, extra_toml=TOML, status_token=ADMIN)


def call(c, node, token, method, path, body=None):
    return c.call(node, method, path, body, headers={"Authorization": f"Bearer {token}"})


def ok(answer, status=200):
    got, body = answer
    assert got == status, body
    return body


def trail(c, node, token=ADMIN, query="limit=100"):
    return ok(call(c, node, token, "GET", f"/v1/audit?{query}"))["entries"]


def summary(entries):
    return [(e["action"], e["actor"], e["target"]) for e in entries]


def _dead_letter(c, node) -> str:
    t = ok(call(c, node, ADMIN, "POST", "/v1/tasks",
                {"task_type": "settle", "tenant": "bank", "max_retries": 0}), 201)
    claimed = ok(call(c, node, ADMIN, "POST", "/v1/claims",
                      {"worker_id": "w1", "task_types": ["settle"], "wait_s": 5}))["tasks"]
    assert [x["task_id"] for x in claimed] == [t["task_id"]]
    ok(call(c, node, ADMIN, "POST", f"/v1/tasks/{t['task_id']}/fail",
            {"fencing_token": claimed[0]["fencing_token"], "error": "no", "retryable": False}))
    return t["task_id"]


def _audit_archive(c, node) -> list[dict]:
    out = []
    for path in sorted((c.data_dir(node) / "archive").glob("audit-*.jsonl.gz")):
        out += [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]
    return out


def test_actions_are_read_back_with_actors_survive_a_leader_kill_and_are_archived(audited):
    c = audited
    leader = c.wait_leader()
    node = c.followers(leader)[0]          # writes and reads through a follower
    task = ok(call(c, node, ACME, "POST", "/v1/tasks", {"task_type": "mail"}), 201)
    ok(call(c, node, ACME, "POST", f"/v1/tasks/{task['task_id']}/cancel"))
    ok(call(c, node, ADMIN, "PUT", "/v1/schedules/nightly",
            {"tenant": "acme", "cron": "0 3 * * *", "task": {"task_type": "report"}}))
    dead = _dead_letter(c, node)
    ok(call(c, node, ADMIN, "POST", f"/v1/tasks/{dead}/replay"))
    refused = call(c, node, ADMIN, "POST", f"/v1/tasks/{dead}/discard")   # pending now
    assert refused[0] == 409, refused
    want = [("task.replay", "admin", dead), ("schedule.put", "admin", "acme/nightly"),
            ("task.cancel", "tenant:acme", task["task_id"])]
    assert summary(trail(c, node)) == want, "a refusal records nothing"
    cancel = trail(c, node)[-1]
    assert cancel["change"]["after"]["state"] == "cancelled" and cancel["tenant"] == "acme"
    assert summary(trail(c, node, ACME)) == want[1:], "a tenant sees its own entries only"
    assert summary(trail(c, node, query="actor=tenant:acme")) == want[2:]

    c.kill(leader)
    new_leader = c.wait_leader(exclude=[leader])
    wait_until(lambda: summary(trail(c, new_leader)) == want, 30, "the trail on the new leader")

    # A transfer asked of the new leader is recorded, then two tenant settings push the
    # trail past its bound: its two oldest entries are evicted and archived.
    ok(call(c, new_leader, ADMIN, "POST", "/v1/cluster/transfer-leadership", {}), 202)
    survivors = [n for n in c.ids if n != leader]
    for weight in (2, 3):
        wait_until(lambda w=weight: call(c, survivors[0], ADMIN, "PUT", "/v1/tenants/acme",
                                         {"weight": w})[0] == 200, 30, "a tenant setting")
    entries = []

    def bounded():
        entries[:] = trail(c, survivors[0])
        return len(entries) == AUDIT_MAX and entries[-1]["action"] == "task.replay"
    wait_until(bounded, 30, "the trail at its bound")
    assert [e["action"] for e in entries] == ["tenant.set", "tenant.set",
                                              "cluster.transfer_leadership", "task.replay"]
    assert entries[2]["target"] == new_leader and entries[2]["tenant"] is None
    for n in survivors:
        wait_until(lambda n=n: len(_audit_archive(c, n)) >= 2, 30, f"{n}'s audit archive")
        archived = {r["audit"]["id"]: r["audit"] for r in _audit_archive(c, n)}
        assert summary(archived.values()) == want[:0:-1], n     # cancel, then schedule.put
        assert all(r["v"] == 1 and r["archived_at"] for r in _audit_archive(c, n))
        assert not list((c.data_dir(n) / "archive").glob("tasks-*")), "no task was evicted"
