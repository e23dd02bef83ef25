"""Tenant-scoped tokens on a real 3-node cluster with [auth] (DESIGN.md section 7).

Each rule is checked through the HTTP API of real tsnode processes, and the ones that cross
nodes (claims and linearizable reads forwarded to the leader, cluster status gathered from
peers) are asked of a follower so that the caller's identity has to survive the hop.
"""
from __future__ import annotations

import hashlib
import uuid

import pytest

from tests.harness.cluster import Cluster

pytestmark = pytest.mark.timeout(180)

ADMIN, ACME, ACME2, GLOBEX, SCRAPER = (f"tok-{n}-{uuid.uuid4().hex}" for n in
                                       ("admin", "acme", "acme2", "globex", "metrics"))


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


AUTH_TOML = f"""
[auth]
admin_token_sha256 = ["{sha(ADMIN)}"]
metrics_token_sha256 = ["{sha(SCRAPER)}"]
[auth.tenant_token_sha256]
acme = ["{sha(ACME)}", "{sha(ACME2)}"]
globex = ["{sha(GLOBEX)}"]
"""


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def c(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("auth"), extra_toml=AUTH_TOML,
                 status_token=ADMIN) as cl:
        cl.start()
        cl.leader = cl.wait_leader()
        cl.follower = cl.followers(cl.leader)[0]
        yield cl


def call(c, token, method, path, body=None, node=None):
    headers = bearer(token) if token is not None else None
    return c.call(node or c.follower, method, path, body, headers=headers)


def submit(c, token, **fields):
    fields.setdefault("task_type", "auth-t")
    status, body = call(c, token, "POST", "/v1/tasks", fields)
    assert status == 201, body
    return body


def assert_error(answer, status: int, code: str):
    got_status, body = answer
    assert got_status == status, body
    assert body["error"]["code"] == code, body


def test_no_token_or_an_unknown_one_is_unauthenticated(c):
    assert_error(call(c, None, "GET", "/v1/tasks"), 401, "unauthenticated")
    assert_error(call(c, "not-a-known-token", "GET", "/v1/tasks"), 401, "unauthenticated")
    assert_error(call(c, sha(ADMIN), "GET", "/v1/tasks"), 401, "unauthenticated")  # the digest
    s, b = c.call(c.follower, "POST", "/v1/tasks", {"task_type": "x"},
                  headers={"Authorization": f"Basic {ADMIN}"})
    assert (s, b["error"]["code"]) == (401, "unauthenticated")
    assert_error(call(c, None, "GET", "/v1/no-such-route"), 401, "unauthenticated")


def test_health_readiness_and_the_dashboard_page_stay_open(c):
    for path in ("/healthz", "/readyz"):
        status, body = call(c, None, "GET", path)
        assert status == 200, body
    r = c.client.get(c.url(c.follower) + "/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert c.client.get(c.url(c.follower) + "/static/app.js").status_code == 200


def test_admin_token_does_everything(c):
    task = submit(c, ADMIN, tenant="globex")
    assert task["tenant"] == "globex"
    status, body = call(c, ADMIN, "PUT", "/v1/tenants/globex", {"max_running": 50})
    assert status == 200 and body["max_running"] == 50, body
    status, body = call(c, ADMIN, "GET", "/v1/cluster")
    assert status == 200, body
    assert all(n["reachable"] for n in body["nodes"]), body   # peers accepted the admin token


def test_a_tenant_submit_defaults_to_its_tenant_and_cannot_name_another(c):
    assert submit(c, ACME)["tenant"] == "acme"
    assert submit(c, ACME2, tenant="acme")["tenant"] == "acme"
    assert_error(call(c, ACME, "POST", "/v1/tasks", {"task_type": "t", "tenant": "globex"}),
                 403, "forbidden")
    batch = {"tasks": [{"task_type": "t"}, {"task_type": "t", "tenant": "globex"}]}
    assert_error(call(c, ACME, "POST", "/v1/tasks", batch), 403, "forbidden")
    status, body = call(c, ACME, "POST", "/v1/tasks", {"tasks": [{"task_type": "t"}] * 2})
    assert status == 201 and [t["tenant"] for t in body["tasks"]] == ["acme", "acme"], body


def test_another_tenants_task_reads_as_not_found_and_lists_are_scoped(c):
    theirs = submit(c, GLOBEX)
    mine = submit(c, ACME)
    path = f"/v1/tasks/{theirs['task_id']}"
    assert_error(call(c, ACME, "GET", path), 404, "not_found")
    assert_error(call(c, ACME, "GET", path + "?consistency=linearizable"), 404, "not_found")
    status, body = call(c, ACME, "GET", f"/v1/tasks/{mine['task_id']}?consistency=linearizable")
    assert status == 200 and body["tenant"] == "acme", body
    assert call(c, GLOBEX, "GET", path)[0] == 200
    status, body = call(c, ACME, "GET", "/v1/tasks?limit=1000")
    assert status == 200 and body["tasks"], body
    assert {t["tenant"] for t in body["tasks"]} == {"acme"}
    assert_error(call(c, ACME, "GET", "/v1/tasks?tenant=globex"), 403, "forbidden")
    assert_error(call(c, ACME, "POST", path + "/cancel"), 404, "not_found")
    status, body = call(c, GLOBEX, "GET", path)
    assert body["state"] == "pending", body          # the refused cancel changed nothing


def test_tenant_claims_see_only_their_tenant_and_act_only_on_its_tasks(c):
    kind = f"claim-{uuid.uuid4().hex[:8]}"
    theirs = submit(c, GLOBEX, task_type=kind, priority=0)
    mine = submit(c, ACME, task_type=kind, priority=9)
    claim = {"worker_id": "w-acme", "task_types": [kind], "max_tasks": 10, "wait_s": 1}
    # From a follower: the claim is forwarded to the leader with the caller's token.
    status, body = call(c, ACME, "POST", "/v1/claims", claim)
    assert status == 200, body
    assert [t["task_id"] for t in body["tasks"]] == [mine["task_id"]]
    status, body = call(c, GLOBEX, "POST", "/v1/claims", {**claim, "worker_id": "w-globex"})
    assert [t["task_id"] for t in body["tasks"]] == [theirs["task_id"]], body
    token = body["tasks"][0]["fencing_token"]
    base = f"/v1/tasks/{theirs['task_id']}"
    for verb, extra in (("heartbeat", {}), ("complete", {"result": 1}),
                        ("fail", {"error": "x"}), ("release", {})):
        assert_error(call(c, ACME, "POST", f"{base}/{verb}", {"fencing_token": token, **extra}),
                     404, "not_found")
    status, body = call(c, ACME, "POST", "/v1/completions",
                        {"completions": [{"task_id": theirs["task_id"], "fencing_token": token,
                                          "result": None}]})
    assert status == 200 and body["results"][0]["error"]["code"] == "not_found", body
    status, body = call(c, ACME, "POST", "/v1/heartbeats",
                        {"heartbeats": [{"task_id": theirs["task_id"], "fencing_token": token}]})
    assert status == 200 and body["results"][0]["error"]["code"] == "not_found", body
    status, body = call(c, GLOBEX, "POST", f"{base}/complete", {"fencing_token": token})
    assert status == 200 and body["state"] == "completed", body


def test_schedules_are_scoped_to_the_tokens_tenant(c):
    sched = {"cron": "0 0 1 1 *", "task": {"task_type": "s"}}
    status, body = call(c, GLOBEX, "PUT", "/v1/schedules/nightly", sched)
    assert status in (200, 201) and body["tenant"] == "globex", body
    assert_error(call(c, ACME, "GET", "/v1/schedules/nightly"), 404, "not_found")
    assert_error(call(c, ACME, "POST", "/v1/schedules/nightly/pause"), 404, "not_found")
    assert_error(call(c, ACME, "PUT", "/v1/schedules/x", {**sched, "tenant": "globex"}),
                 403, "forbidden")
    status, body = call(c, ACME, "PUT", "/v1/schedules/nightly", sched)   # its own, same id
    assert status in (200, 201) and body["tenant"] == "acme", body
    status, body = call(c, ACME, "GET", "/v1/schedules")
    assert {s["tenant"] for s in body["schedules"]} == {"acme"}, body
    status, body = call(c, GLOBEX, "GET", "/v1/schedules/nightly")
    assert status == 200 and body["tenant"] == "globex" and not body["paused"], body


def test_tenant_settings_and_cluster_operations_need_the_admin_token(c):
    assert_error(call(c, ACME, "PUT", "/v1/tenants/acme", {"max_running": 1}), 403, "forbidden")
    assert_error(call(c, ACME, "PUT", "/v1/limits/partner", {"concurrency": 1}), 403,
                 "forbidden")
    assert_error(call(c, ACME, "DELETE", "/v1/limits/partner"), 403, "forbidden")
    for path in ("/v1/queues/pause", "/v1/queues/resume"):   # a pause may hold every tenant
        assert_error(call(c, ACME, "POST", path, {"tenant": "acme"}), 403, "forbidden")
    status, body = call(c, ADMIN, "POST", "/v1/queues/pause", {"tenant": "globex"})
    assert status == 200 and body["actor"] == "admin", body
    status, body = call(c, ACME, "GET", "/v1/queues")        # only what covers its tasks
    assert status == 200 and body["pauses"] == [], body
    assert call(c, ADMIN, "POST", "/v1/queues/resume", {"tenant": "globex"})[0] == 200
    assert_error(call(c, ACME, "GET", "/v1/cluster"), 403, "forbidden")
    assert_error(call(c, ACME, "GET", "/v1/cluster/self"), 403, "forbidden")
    assert_error(call(c, ACME, "POST", "/v1/cluster/transfer-leadership"), 403, "forbidden")
    assert_error(call(c, ACME, "GET", "/v1/timeseries"), 403, "forbidden")   # cluster-wide
    assert call(c, ADMIN, "GET", "/v1/timeseries")[0] == 200
    assert_error(call(c, ACME, "GET", "/v1/tenants/globex"), 404, "not_found")
    status, body = call(c, ACME, "GET", "/v1/tenants")
    assert status == 200 and {t["tenant"] for t in body["tenants"]} <= {"acme"}, body
    assert c.wait_leader() == c.leader          # nothing moved


def test_metrics_need_the_admin_or_a_metrics_token(c):
    assert_error(call(c, None, "GET", "/metrics"), 401, "unauthenticated")
    assert_error(call(c, ACME, "GET", "/metrics"), 403, "forbidden")
    for token in (ADMIN, SCRAPER):
        r = c.client.get(c.url(c.follower) + "/metrics", headers=bearer(token))
        assert r.status_code == 200 and "# TYPE" in r.text
    assert_error(call(c, SCRAPER, "GET", "/v1/tasks"), 403, "forbidden")
    assert_error(call(c, SCRAPER, "POST", "/v1/tasks", {"task_type": "t"}), 403, "forbidden")


def test_an_idempotency_key_never_answers_with_another_tenants_result(c):
    key = {"Idempotency-Key": f"shared-{uuid.uuid4().hex}"}
    body = {"task_type": "idem", "payload": {"secret": "globex-only"}}
    s1, theirs = c.call(c.follower, "POST", "/v1/tasks", body, headers={**bearer(GLOBEX), **key})
    s2, again = c.call(c.leader, "POST", "/v1/tasks", body, headers={**bearer(GLOBEX), **key})
    assert (s1, s2) == (201, 201) and again["task_id"] == theirs["task_id"]   # a retry
    s3, mine = c.call(c.follower, "POST", "/v1/tasks", {"task_type": "idem"},
                      headers={**bearer(ACME), **key})
    assert s3 == 201 and mine["tenant"] == "acme", mine
    assert mine["task_id"] != theirs["task_id"] and "globex-only" not in str(mine)
    long_key = {"Idempotency-Key": "k" * 256}           # longer than a state machine id
    status, task = c.call(c.follower, "POST", "/v1/tasks", {"task_type": "idem"},
                          headers={**bearer(ACME), **long_key})
    assert status == 201, task
