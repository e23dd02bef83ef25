"""Client transport: rotation on 503 and dead nodes, deadlines, idempotency keys, min_seq,
error mapping, paging; and the AsyncClient twin."""
from __future__ import annotations

import datetime as dt
import time

import pytest

from tsched.client import ApiError, AsyncClient, Client, Unavailable

try:
    from client_support import FakeNode, dead_url, error
except ImportError:  # collected as a package
    from tests.unit.client.client_support import FakeNode, dead_url, error


@pytest.fixture
def nodes():
    made = [FakeNode(), FakeNode()]
    yield made
    for n in made:
        n.close()


def task(task_id="t1", seq=7, **extra):
    return {"task_id": task_id, "state": "pending", "duplicate": False, "applied_seq": seq, **extra}


def test_urls_accept_list_or_comma_string_and_refuse_junk():
    assert Client("http://a:1, http://b:2/").urls == ["http://a:1", "http://b:2"]
    assert Client(["http://a:1"]).urls == ["http://a:1"]
    with pytest.raises(ValueError):
        Client("")
    with pytest.raises(ValueError):
        Client("ftp://x")


def test_503_rotates_to_next_node_with_the_same_idempotency_key(nodes):
    a, b = nodes
    a.route("POST", "/v1/tasks", lambda r: error("no_leader", status=503))
    b.json("POST", "/v1/tasks", 201, task())
    with Client([a.url, b.url], timeout_s=5) as c:
        out = c.submit("email", {"to": "x"}, priority=3)
        assert out["task_id"] == "t1"
        key_a = a.requests("POST", "/v1/tasks")[0].headers["Idempotency-Key"]
        key_b = b.requests("POST", "/v1/tasks")[0].headers["Idempotency-Key"]
        assert key_a == key_b and len(key_a) >= 16
        # the body's idempotency_key is the user's: the client never invents one
        assert "idempotency_key" not in b.requests("POST", "/v1/tasks")[0].body
        assert b.requests("POST", "/v1/tasks")[0].body == {"task_type": "email",
                                                          "payload": {"to": "x"}, "priority": 3}
        c.submit("email")   # sticks to the node that answered
        assert len(a.requests("POST", "/v1/tasks")) == 1
        assert len(b.requests("POST", "/v1/tasks")) == 2
        keys = {s.headers["Idempotency-Key"] for s in b.requests("POST", "/v1/tasks")}
        assert len(keys) == 2   # a new logical write gets a new key


def test_dead_node_is_skipped(nodes):
    a, _ = nodes
    a.json("GET", "/v1/tasks/t1", 200, task())
    with Client([dead_url(), a.url], timeout_s=5) as c:
        assert c.get("t1")["task_id"] == "t1"


def test_no_node_answering_raises_unavailable_within_the_deadline(nodes):
    a, _ = nodes
    a.route("GET", "/v1/cluster", lambda r: error("no_leader", status=503))
    with Client([dead_url(), a.url], timeout_s=0.6) as c:
        t0 = time.monotonic()
        with pytest.raises(Unavailable) as info:
            c.cluster_status()
        assert time.monotonic() - t0 < 5   # bounded by the deadline, not forever
    assert info.value.code == "unavailable"
    assert isinstance(info.value, ApiError)
    assert len(a.requests("GET", "/v1/cluster")) >= 2   # it backed off and tried again


def test_api_error_carries_code_message_details_status(nodes):
    a, _ = nodes
    a.route("POST", "/v1/tasks/t1/complete", lambda r: error("stale_token", "held by 88", 409))
    with Client(a.url) as c:
        with pytest.raises(ApiError) as info:
            c.complete("t1", 87, {"ok": 1})
    e = info.value
    assert (e.code, e.message, e.details, e.status) == ("stale_token", "held by 88",
                                                        {"why": "stale_token"}, 409)
    assert not isinstance(e, Unavailable)
    assert len(a.requests("POST", "/v1/tasks/t1/complete")) == 1   # 4xx is not retried


def test_non_json_error_body_becomes_http_code(nodes):
    a, _ = nodes
    a.json("GET", "/v1/tasks/x", 500, "boom")
    with Client(a.url) as c, pytest.raises(ApiError) as info:
        c.get("x")
    assert info.value.code == "http_500" and info.value.status == 500


def test_reads_send_the_highest_applied_seq_seen(nodes):
    a, _ = nodes
    a.json("POST", "/v1/tasks", 201, task(seq=41))
    a.json("GET", "/v1/tasks/t1", 200, task(seq=40))
    a.json("GET", "/v1/cluster", 200, {"leader": "n1", "term": 2, "nodes": []})
    with Client(a.url) as c:
        c.get("t1")
        assert "min_seq" not in a.requests("GET", "/v1/tasks/t1")[0].query
        c.submit("x")
        c.get("t1")
        c.get("t1")   # a lower answer does not lower it
        sent = [s.query.get("min_seq") for s in a.requests("GET", "/v1/tasks/t1")]
        assert sent == [None, "41", "41"]
        assert "min_seq" not in a.requests("POST", "/v1/tasks")[0].query
        c.cluster_status()   # not a replica read: no min_seq
        assert "min_seq" not in a.requests("GET", "/v1/cluster")[0].query
        assert c.applied_seq == 41


def test_list_follows_next_cursor_and_honours_limit(nodes):
    a, _ = nodes
    pages = {None: (["a", "b"], "c1"), "c1": (["c"], "c2"), "c2": (["d"], None)}

    def listing(req):
        ids, nxt = pages[req.query.get("cursor")]
        return 200, {"tasks": [{"task_id": i} for i in ids], "next_cursor": nxt, "applied_seq": 1}
    a.route("GET", "/v1/tasks", listing)
    with Client(a.url) as c:
        assert [t["task_id"] for t in c.list(state="pending")] == ["a", "b", "c", "d"]
        assert a.requests("GET", "/v1/tasks")[0].query["state"] == "pending"
        a.seen.clear()
        assert [t["task_id"] for t in c.list(limit=2)] == ["a", "b"]
        assert len(a.seen) == 1 and a.seen[0].query["limit"] == "2"


def test_ids_are_quoted_into_one_path_segment(nodes):
    a, _ = nodes
    a.json("POST", "/v1/tasks/a/b/cancel", 200, task("a/b"))
    with Client(a.url) as c:
        c.cancel("a/b")
        with pytest.raises(ValueError):
            c.get("")
    assert a.seen[-1].raw_path == "/v1/tasks/a%2Fb/cancel"


def test_token_and_times(nodes):
    a, _ = nodes
    a.json("POST", "/v1/tasks", 201, task())
    with Client(a.url, token="s3cret") as c:
        plus_one = dt.timezone(dt.timedelta(hours=1))
        c.submit("x", run_at=dt.datetime(2026, 12, 1, 16, 0, tzinfo=plus_one))
        with pytest.raises(ValueError):
            c.submit("x", run_at=dt.datetime(2026, 12, 1))
    sent = a.requests("POST", "/v1/tasks")[0]
    assert sent.headers["Authorization"] == "Bearer s3cret"
    assert sent.body["run_at"] == "2026-12-01T15:00:00Z"


def test_schedule_put_nests_the_task_template(nodes):
    a, _ = nodes
    a.json("PUT", "/v1/schedules/nightly", 200, {"schedule_id": "nightly"})
    a.json("POST", "/v1/schedules/nightly/pause", 200, {"schedule_id": "nightly"})
    with Client(a.url) as c:
        c.put_schedule("nightly", "0 3 * * *", "report", {"k": 1}, timezone="Europe/Paris",
                       tenant="acme", priority=2, overlap="skip")
        c.pause_schedule("nightly", tenant="acme")
    assert a.requests("PUT", "/v1/schedules/nightly")[0].body == {
        "cron": "0 3 * * *", "timezone": "Europe/Paris", "tenant": "acme", "overlap": "skip",
        "task": {"task_type": "report", "payload": {"k": 1}, "priority": 2}}
    assert a.requests("POST", "/v1/schedules/nightly/pause")[0].query == {"tenant": "acme"}


def test_batch_calls_return_their_lists(nodes):
    a, _ = nodes
    a.json("POST", "/v1/tasks", 201, {"tasks": [task("1"), task("2")], "applied_seq": 3})
    a.json("POST", "/v1/claims", 200, {"tasks": [task("1", fencing_token=5)], "applied_seq": 4})
    a.json("GET", "/v1/cron/preview", 200, {"fires": ["2026-12-01T03:00:00+01:00"]})
    with Client(a.url) as c:
        done = c.submit_many([{"task_type": "a"}, {"task_type": "b", "payload": 1}])
        assert [t["task_id"] for t in done] == ["1", "2"]
        assert a.requests("POST", "/v1/tasks")[0].body == {
            "tasks": [{"task_type": "a"}, {"task_type": "b", "payload": 1}]}
        assert c.claim("w1", ["a"], max_tasks=2, wait_s=0)[0]["fencing_token"] == 5
        assert c.cron_preview("0 3 * * *", timezone="Europe/Paris", count=1) == [
            "2026-12-01T03:00:00+01:00"]


async def test_async_client_rotates_and_keeps_the_key(nodes):
    a, b = nodes
    a.route("POST", "/v1/tasks/t1/cancel", lambda r: error("unavailable", status=503))
    b.json("POST", "/v1/tasks/t1/cancel", 200, task(state="cancelled", seq=9))
    b.json("GET", "/v1/tasks/t1", 200, task(seq=9))
    async with AsyncClient(f"{a.url},{b.url}", timeout_s=5) as c:
        assert (await c.cancel("t1"))["task_id"] == "t1"
        await c.get("t1")
    assert (a.requests("POST", "/v1/tasks/t1/cancel")[0].headers["Idempotency-Key"]
            == b.requests("POST", "/v1/tasks/t1/cancel")[0].headers["Idempotency-Key"])
    assert b.requests("GET", "/v1/tasks/t1")[0].query["min_seq"] == "9"


async def test_async_client_unavailable_and_paging(nodes):
    a, _ = nodes
    a.json("GET", "/v1/schedules", 200, {"schedules": [{"schedule_id": "s"}], "next_cursor": None})
    async with AsyncClient(a.url) as c:
        assert [s["schedule_id"] async for s in c.list_schedules()] == ["s"]
    async with AsyncClient(dead_url(), timeout_s=0.3) as c:
        with pytest.raises(Unavailable):
            await c.get("t1")


def test_minimal_reports_send_prefer_return_minimal(nodes):
    a, _ = nodes
    a.json("POST", "/v1/completions", 200, {"results": [{"task_id": "t1", "state": "completed"}]})
    a.json("POST", "/v1/tasks", 201, {"tasks": [{"task_id": "t2", "state": "pending",
                                                 "duplicate": False}]})
    with Client(a.url) as c:
        assert c.completions([{"task_id": "t1", "fencing_token": 1}], minimal=True) == [
            {"task_id": "t1", "state": "completed"}]
        c.submit_many([{"task_type": "x"}], minimal=True)
        c.completions([{"task_id": "t1", "fencing_token": 1}])
    sent = a.requests("POST", "/v1/completions")
    assert sent[0].headers["Prefer"] == "return=minimal" and "Prefer" not in sent[1].headers
    assert a.requests("POST", "/v1/tasks")[0].headers["Prefer"] == "return=minimal"


def test_minimal_claims_send_prefer_return_minimal(nodes):
    a, _ = nodes
    a.json("POST", "/v1/claims", 200, {"tasks": []})
    with Client(a.url) as c:
        assert c.claim("w", ["t"], minimal=True) == []
        assert c.claim("w", ["t"]) == []
    sent = a.requests("POST", "/v1/claims")
    assert sent[0].headers["Prefer"] == "return=minimal" and "Prefer" not in sent[1].headers


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_claims_follow_the_leader_a_claim_answer_names_and_other_calls_stay(nodes, kind):
    """A node names the leader's URL on claim answers (X-Tsched-Leader): the next claim goes
    there (a follower would only forward it); reads and reports stay on their node; a name
    that is not one of the client's URLs is ignored."""
    a, b = nodes
    named = {"leader": b.url}
    for n in nodes:
        n.route("POST", "/v1/claims",
                lambda req: (200, {"tasks": [], "applied_seq": 1},
                             {"X-Tsched-Leader": named["leader"]}))
        n.json("GET", "/v1/tasks/t1", 200, task())

    def calls(c):
        c.claim("w", ["x"])
        c.claim("w", ["x"])
        c.get("t1")
        named["leader"] = "http://elsewhere:1"
        c.claim("w", ["x"])
        c.claim("w", ["x"])

    if kind == "sync":
        with Client([a.url, b.url]) as c:
            calls(c)
    else:
        import asyncio

        async def run():
            async with AsyncClient([a.url, b.url]) as c:
                await c.claim("w", ["x"])
                await c.claim("w", ["x"])
                await c.get("t1")
                named["leader"] = "http://elsewhere:1"
                await c.claim("w", ["x"])
                await c.claim("w", ["x"])
        asyncio.run(run())
    # a: the first claim (no leader known yet) and the read, which stayed while claims
    # went to b; b: the claims after b was named, and then, the name being none of ours,
    # the next claim where the last one was answered (as any call would)
    assert len(a.requests("POST", "/v1/claims")) == 1
    assert len(a.requests("GET", "/v1/tasks/t1")) == 1
    assert len(b.requests("POST", "/v1/claims")) == 3


def test_heartbeats_go_to_the_leader_a_claim_named_and_move_nothing(nodes):
    """Heartbeats (with the worker's slot report, DESIGN 14.4) go first to the node a
    claim answer named leader; the node other calls stick to does not move."""
    a, b = nodes
    for n in nodes:
        n.route("POST", "/v1/claims",
                lambda req: (200, {"tasks": [], "applied_seq": 1}, {"X-Tsched-Leader": b.url}))
        n.json("POST", "/v1/heartbeats", 200, {"results": []})
        n.json("GET", "/v1/tasks/t1", 200, task())
    with Client([a.url, b.url]) as c:
        c.get("t1")                        # sticks to a
        c.heartbeats([], slots={"total": 1})   # no leader known yet: where reads go
        c.claim("w", ["x"])                # b named leader
        c.heartbeats([], slots={"total": 1})
        c.get("t1")
    assert len(a.requests("POST", "/v1/heartbeats")) == 1
    assert len(b.requests("POST", "/v1/heartbeats")) == 1
    assert len(a.requests("GET", "/v1/tasks/t1")) == 2
    assert b.requests("POST", "/v1/heartbeats")[0].body["slots"] == {"total": 1}


def test_request_expired_is_a_final_error_and_keys_carry_their_time(nodes):
    """A write whose key is past the cluster's request window: raised at once, not retried
    on another node, not retried under a new key. The key names when it was made."""
    a, b = nodes
    for node in nodes:
        node.route("POST", "/v1/tasks", lambda r: error("request_expired", "too old", 409))
    before_ms = int(time.time() * 1000)
    with Client([a.url, b.url]) as c:
        with pytest.raises(ApiError) as info:
            c.submit("email", {})
    assert info.value.code == "request_expired" and info.value.status == 409
    [sent] = a.requests("POST", "/v1/tasks")
    assert b.requests("POST", "/v1/tasks") == []
    prefix, made_ms, nonce = sent.headers["Idempotency-Key"].split("-")
    assert prefix == "tsched1" and len(nonce) == 32
    assert before_ms <= int(made_ms) <= int(time.time() * 1000)


def test_unavailable_names_each_nodes_own_failure_beside_the_last():
    """The last attempt of a deadline may only have had a sliver of time: the other
    nodes' reasons (here a certificate the client does not trust) stay in the message."""
    from tsched.client._core import Call, unavailable
    cert = "ClientConnectorCertificateError: CERTIFICATE_VERIFY_FAILED"
    err = unavailable(Call("GET", "/v1/tasks/x"), "ConnectionTimeoutError: timeout",
                      {"https://a": cert, "https://b": cert,
                       "https://c": "ConnectionTimeoutError: timeout"})
    assert "CERTIFICATE_VERIFY_FAILED" in str(err) and "https://a" in str(err)
    assert "https://c" not in str(err)             # the last failure is named once
    assert err.details["by_node"]["https://b"] == cert
    assert str(unavailable(Call("GET", "/x"), None)).endswith("GET /x")
