"""GET /v1/audit over the real app and a real single-node replica (DESIGN 14.6): actors
from tokens (`anonymous` without [auth]), tenant scoping, filters, cursors, bad queries."""
from __future__ import annotations

import uuid

from tests.api_support import Api, assert_error
from tsched.node.assembly import node_app
from tsched.node.api.auth import digest_of
from tsched.node.services import Node
from tsched.node.clock import Clock
from tsched.node.config import ClusterConfig, NodeConfig


async def _authed(replica, aiohttp_client) -> Api:
    auth = {"admin_token_sha256": [digest_of("root-t")],
            "tenant_token_sha256": {"acme": [digest_of("acme-t")],
                                    "globex": [digest_of("globex-t")]}}
    me = NodeConfig(id="n1", raft=replica.self_raft, http="127.0.0.1:1", data_dir="/x")
    node = Node(node_id="n1", config=ClusterConfig(name="t", nodes=(me,), auth=auth),
                replica=replica, clock=Clock())
    return Api(await aiohttp_client(node_app(node)), node)


ADMIN = {"Authorization": "Bearer root-t"}
ACME = {"Authorization": "Bearer acme-t"}
GLOBEX = {"Authorization": "Bearer globex-t"}


async def test_a_cancel_without_auth_is_recorded_as_anonymous(api: Api, tt):
    t = await api.submit(task_type=tt)
    status, _ = await api.call("POST", f"/v1/tasks/{t['task_id']}/cancel")
    assert status == 200
    status, out = await api.call("GET", f"/v1/audit?target={t['task_id']}")
    assert status == 200, out
    (e,) = out["entries"]
    assert (e["actor"], e["action"], e["tenant"]) == ("anonymous", "task.cancel", "default")
    assert e["change"] == {"before": {"state": "pending"},
                           "after": {"state": "cancelled", "cancel_requested": False}}
    assert e["at"].endswith("Z") and isinstance(e["id"], int) and e["request_id"]
    assert out["applied_seq"] >= t["applied_seq"]


async def test_tokens_name_the_actor_and_tenants_see_their_own(replica, aiohttp_client):
    api = await _authed(replica, aiohttp_client)
    sid = "s-" + uuid.uuid4().hex[:6]
    body = {"cron": "0 3 * * *", "task": {"task_type": "report"}}
    status, out = await api.call("PUT", f"/v1/schedules/{sid}?", {**body, "tenant": "acme"},
                                 headers=ADMIN)
    assert status == 200, out
    status, out = await api.call("POST", f"/v1/schedules/{sid}/pause", headers=ACME)
    assert status == 200, out
    status, out = await api.call("PUT", "/v1/tenants/globex", {"weight": 3}, headers=ADMIN)
    assert status == 200, out
    status, out = await api.call("GET", f"/v1/audit?target=acme/{sid}", headers=ADMIN)
    assert [(e["action"], e["actor"]) for e in out["entries"]] == [
        ("schedule.pause", "tenant:acme"), ("schedule.put", "admin")]
    status, out = await api.call("GET", "/v1/audit?limit=1000", headers=ACME)
    assert status == 200 and out["entries"]
    assert {e["tenant"] for e in out["entries"]} == {"acme"}
    status, out = await api.call("GET", "/v1/audit?action=tenant.set", headers=GLOBEX)
    assert [e["target"] for e in out["entries"]][:1] == ["globex"]
    status, out = await api.call("GET", "/v1/audit?actor=admin&action=tenant.set",
                                 headers=ADMIN)
    assert out["entries"][0]["change"] == {"before": None,   # a new tenant: every field
                                           "after": {"max_running": 0, "weight": 3}}


async def test_a_transfer_asked_of_the_leader_is_recorded(api: Api):
    status, out = await api.call("POST", "/v1/cluster/transfer-leadership", {})
    assert status == 202, out
    status, out = await api.call("GET", "/v1/audit?action=cluster.transfer_leadership")
    e = out["entries"][0]
    assert (e["actor"], e["target"], e["tenant"]) == ("anonymous", "n1", None)
    assert e["change"] == {"from": "n1", "to": None}


async def test_pages_follow_the_cursor_newest_first(api: Api, tt):
    ids = []
    for _ in range(3):
        t = await api.submit(task_type=tt)
        await api.call("POST", f"/v1/tasks/{t['task_id']}/cancel")
        ids.append(t["task_id"])
    seen, cursor = [], None
    while True:
        q = "/v1/audit?action=task.cancel&limit=2" + (f"&cursor={cursor}" if cursor else "")
        status, out = await api.call("GET", q)
        assert status == 200, out
        seen += [e["target"] for e in out["entries"]]
        cursor = out["next_cursor"]
        if cursor is None:
            break
    assert seen[:3] == ids[::-1]
    status, out = await api.call("GET", "/v1/audit?since=4102444800")   # 2100
    assert status == 200 and out == {**out, "entries": [], "next_cursor": None}


async def test_bad_queries_are_refused_naming_the_field(api: Api):
    for query, field in [("limit=0", "limit"), ("limit=1001", "limit"), ("cursor=abc", "cursor"),
                         ("cursor=" + "9" * 30, "cursor"), ("since=yesterday", "since"),
                         ("actor=" + "a" * 129, "actor"), ("target=" + "t" * 257, "target"),
                         ("action=" + "x" * 65, "action")]:
        status, out = await api.call("GET", f"/v1/audit?{query}")
        assert_error(status, out, 400, "invalid_argument")
        assert out["error"]["details"].get("field") == field, (query, out)
    status, out = await api.call("GET", "/v1/audit?tenant=acme")
    assert_error(status, out, 400, "invalid_argument")
    assert out["error"]["details"]["fields"] == ["tenant"]
