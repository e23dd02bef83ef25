"""Membership endpoints on a single-node cluster (DESIGN 6.2): the member list, and every
refusal that needs no second node (bad fields, unknown ids, shrinking below three)."""
from __future__ import annotations

import pytest

from tests.api_support import Api, assert_error


async def test_the_member_list_names_this_node(api: Api):
    status, got = await api.call("GET", "/v1/cluster/members")
    assert status == 200, got
    assert [m["id"] for m in got["members"]] == ["n1"]
    assert got["members"][0]["raft"] == api.node.replica.self_raft
    assert got["leader"] == "n1"


@pytest.mark.parametrize("body, field", [
    ({"id": "bad id", "raft": "127.0.0.1:1", "http": "127.0.0.1:2"}, "id"),
    ({"id": "", "raft": "127.0.0.1:1", "http": "127.0.0.1:2"}, "id"),
    ({"id": "x" * 65, "raft": "127.0.0.1:1", "http": "127.0.0.1:2"}, "id"),
    ({"raft": "127.0.0.1:1", "http": "127.0.0.1:2"}, "id"),
    ({"id": "n9", "raft": "127.0.0.1", "http": "127.0.0.1:2"}, "raft"),
    ({"id": "n9", "raft": "127.0.0.1:99999", "http": "127.0.0.1:2"}, "raft"),
    ({"id": "n9", "raft": "127.0.0.1:1", "http": "nope"}, "http"),
    ({"id": "n9", "raft": "127.0.0.1:1", "http": 8080}, "http"),
    ({"id": "n9", "raft": "10.0.0.9:8801", "http": "127.0.0.1:2"}, "raft"),   # no secret
])
async def test_bad_fields_are_refused_naming_the_field(api: Api, body, field):
    status, got = await api.call("POST", "/v1/cluster/members", body)
    assert_error(status, got, 400, "invalid_argument")
    assert got["error"]["details"]["field"] == field


async def test_unknown_fields_and_non_objects_are_refused(api: Api):
    status, got = await api.call("POST", "/v1/cluster/members",
                                 {"id": "n9", "raft": "127.0.0.1:1", "http": "127.0.0.1:2",
                                  "role": "voter"})
    assert_error(status, got, 400, "invalid_argument")
    status, got = await api.call("POST", "/v1/cluster/members", ["n9"])
    assert_error(status, got, 400, "invalid_argument")


async def test_an_id_or_address_in_use_is_a_conflict(api: Api):
    raft = api.node.replica.self_raft
    for body, field in (({"id": "n1", "raft": "127.0.0.1:1", "http": "127.0.0.1:2"}, "id"),
                        ({"id": "n9", "raft": raft, "http": "127.0.0.1:2"}, "raft")):
        status, got = await api.call("POST", "/v1/cluster/members", body)
        assert_error(status, got, 409, "conflict")
        assert got["error"]["details"] == {"reason": "member_exists", "field": field}


async def test_removing_an_unknown_member_is_not_found(api: Api):
    status, got = await api.call("DELETE", "/v1/cluster/members/n7")
    assert_error(status, got, 404, "not_found")


async def test_a_cluster_of_fewer_than_three_takes_no_addition(api: Api):
    status, got = await api.call("POST", "/v1/cluster/members",
                                 {"id": "n9", "raft": "127.0.0.1:1", "http": "127.0.0.1:2"})
    assert_error(status, got, 409, "conflict")
    assert got["error"]["details"]["reason"] == "too_few_members"
    assert [m["id"] for m in (await api.call("GET", "/v1/cluster/members"))[1]["members"]] == [
        "n1"]


async def test_the_cluster_never_shrinks_below_three(api: Api):
    status, got = await api.call("DELETE", "/v1/cluster/members/n1")
    assert_error(status, got, 409, "conflict")
    assert got["error"]["details"]["reason"] == "too_few_members"


async def test_with_auth_only_an_admin_token_reads_or_changes_members(replica, aiohttp_client):
    from tsched.node.assembly import node_app
    from tsched.node.api.auth import digest_of
    from tsched.node.services import Node
    from tsched.node.clock import Clock
    from tsched.node.config import ClusterConfig, NodeConfig
    auth = {"admin_token_sha256": [digest_of("root-t")],
            "tenant_token_sha256": {"acme": [digest_of("acme-t")]}}
    me = NodeConfig(id="n1", raft=replica.self_raft, http="127.0.0.1:1", data_dir="/x")
    node = Node(node_id="n1", config=ClusterConfig(name="t", nodes=(me,), auth=auth),
                replica=replica, clock=Clock())
    api = Api(await aiohttp_client(node_app(node)), node)
    tenant = {"Authorization": "Bearer acme-t"}
    body = {"id": "n9", "raft": "127.0.0.1:1", "http": "127.0.0.1:2"}
    for method, path, sent in (("GET", "/v1/cluster/members", None),
                               ("POST", "/v1/cluster/members", body),
                               ("DELETE", "/v1/cluster/members/n1", None)):
        status, got = await api.call(method, path, sent, headers=tenant)
        assert_error(status, got, 403, "forbidden")
        status, got = await api.call(method, path, sent)
        assert_error(status, got, 401, "unauthenticated")
    status, got = await api.call("GET", "/v1/cluster/members",
                                 headers={"Authorization": "Bearer root-t"})
    assert status == 200 and got["members"][0]["id"] == "n1"
