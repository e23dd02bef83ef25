"""Task endpoints: submit, get, list, cancel, replay/discard; every bad input's 4xx."""
from __future__ import annotations


from dataclasses import replace

import pytest

from tsched.node.api import reads as api_reads
from tests.api_support import Api, assert_error


async def test_submit_renders_defaults_and_reads_back(api: Api, tt):
    t = await api.submit(task_type=tt, payload={"to": "a@b.c"})
    assert t["state"] == "pending" and t["duplicate"] is False
    assert t["tenant"] == "default" and t["priority"] == 5 and t["max_retries"] == 3
    assert t["timeout_s"] == 300 and t["attempt"] == 0 and t["attempts"] == []
    assert t["payload"] == {"to": "a@b.c"}
    assert t["retry"]["backoff"] == "exponential"
    assert t["run_at"].endswith("Z") and len(t["run_at"]) == len("2026-12-01T15:00:00.000Z")
    assert isinstance(t["applied_seq"], int) and t["applied_seq"] >= 1
    status, got = await api.call("GET", f"/v1/tasks/{t['task_id']}?min_seq={t['applied_seq']}")
    assert status == 200 and got["task_id"] == t["task_id"] and got["payload"] == {"to": "a@b.c"}
    assert got["applied_seq"] >= t["applied_seq"]


async def test_submit_fields_times_and_durations(api: Api, tt):
    t = await api.submit(task_type=tt, tenant="acme", priority=0, run_at="2027-06-02T03:04:05Z",
                         timeout_s=1.5, max_retries=0, idempotency_key="k-" + tt,
                         retry={"backoff": "fixed", "base_s": 2, "max_s": 2, "jitter": 0})
    assert t["run_at"] == "2027-06-02T03:04:05.000Z"
    assert t["timeout_s"] == 1.5 and t["max_retries"] == 0 and t["priority"] == 0
    assert t["retry"] == {"backoff": "fixed", "base_s": 2, "max_s": 2, "multiplier": 2.0,
                          "jitter": 0.0}
    epoch = await api.submit(task_type=tt, run_at=1811905445.25)   # epoch seconds
    assert epoch["run_at"] == "2027-06-02T03:04:05.250Z"
    offset = await api.submit(task_type=tt, run_at="2027-06-02T05:04:05+02:00")
    assert offset["run_at"] == "2027-06-02T03:04:05.000Z"


async def test_delay_s_sets_run_at_from_now(api: Api, tt):
    now_ms = api.node.clock.now_ms()
    t = await api.submit(task_type=tt, delay_s=60)
    status, got = await api.call("GET", f"/v1/tasks/{t['task_id']}")
    from datetime import datetime
    run_at_ms = datetime.fromisoformat(got["run_at"]).timestamp() * 1000
    assert now_ms + 60_000 <= run_at_ms <= now_ms + 60_000 + 5_000


async def test_idempotency_key_returns_the_same_task_as_duplicate(api: Api, tt):
    first = await api.submit(task_type=tt, idempotency_key="inv-42-" + tt)
    again = await api.submit(task_type=tt, idempotency_key="inv-42-" + tt)
    assert again["task_id"] == first["task_id"] and again["duplicate"] is True


async def test_idempotency_key_header_makes_a_retried_request_apply_once(api: Api, tt):
    key = {"Idempotency-Key": "req-" + tt}
    s1, a = await api.call("POST", "/v1/tasks", {"task_type": tt}, headers=key)
    s2, b = await api.call("POST", "/v1/tasks", {"task_type": tt}, headers=key)
    assert s1 == s2 == 201 and a["task_id"] == b["task_id"]
    status, listed = await api.call("GET", f"/v1/tasks?task_type={tt}")
    assert [t["task_id"] for t in listed["tasks"]] == [a["task_id"]]


async def test_a_retried_batch_under_one_key_applies_each_item_once(api: Api, tt):
    key = {"Idempotency-Key": "batch-" + tt}
    body = {"tasks": [{"task_type": tt, "payload": i} for i in range(3)]}
    s1, a = await api.call("POST", "/v1/tasks", body, headers=key)
    s2, b = await api.call("POST", "/v1/tasks", body, headers=key)
    assert s1 == s2 == 201
    ids = [t["task_id"] for t in a["tasks"]]
    assert len(set(ids)) == 3 and [t["task_id"] for t in b["tasks"]] == ids
    status, listed = await api.call("GET", f"/v1/tasks?task_type={tt}")
    assert sorted(t["task_id"] for t in listed["tasks"]) == sorted(ids)


async def test_batch_submit_answers_in_order(api: Api, tt):
    status, body = await api.call("POST", "/v1/tasks", {"tasks": [
        {"task_type": tt, "payload": i} for i in range(3)]})
    assert status == 201
    assert [t["payload"] for t in body["tasks"]] == [0, 1, 2]
    assert all(t["state"] == "pending" and t["duplicate"] is False for t in body["tasks"])
    assert len({t["task_id"] for t in body["tasks"]}) == 3


async def test_list_filters_and_paginates(api: Api, tt):
    ids = {(await api.submit(task_type=tt, tenant="lister"))["task_id"] for _ in range(5)}
    seen, cursor = [], None
    for _ in range(5):
        path = f"/v1/tasks?task_type={tt}&tenant=lister&state=pending&limit=2"
        status, page = await api.call("GET", path + (f"&cursor={cursor}" if cursor else ""))
        assert status == 200 and len(page["tasks"]) <= 2
        seen += [t["task_id"] for t in page["tasks"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)
    status, page = await api.call("GET", f"/v1/tasks?task_type={tt}&state=completed")
    assert status == 200 and page["tasks"] == []


async def test_cancel_pending_then_cancel_again_is_refused(api: Api, tt):
    t = await api.submit(task_type=tt, delay_s=600)
    status, got = await api.call("POST", f"/v1/tasks/{t['task_id']}/cancel")
    assert status == 200 and got["state"] == "cancelled"
    status, body = await api.call("POST", f"/v1/tasks/{t['task_id']}/cancel")
    assert_error(status, body, 409, "invalid_state")


async def test_replay_and_discard_a_dead_letter(api: Api, tt):
    t = await api.submit(task_type=tt, max_retries=0)
    (claimed,) = await api.claim([tt])
    status, failed = await api.call("POST", f"/v1/tasks/{t['task_id']}/fail",
                                    {"fencing_token": claimed["fencing_token"], "error": "boom"})
    assert status == 200 and failed["state"] == "dead_letter" and failed["last_error"] == "boom"
    status, listed = await api.call("GET", f"/v1/tasks?state=dead_letter&task_type={tt}")
    assert [x["task_id"] for x in listed["tasks"]] == [t["task_id"]]
    status, replayed = await api.call("POST", f"/v1/tasks/{t['task_id']}/replay")
    assert status == 200 and replayed["state"] == "pending"
    status, body = await api.call("POST", f"/v1/tasks/{t['task_id']}/discard")
    assert_error(status, body, 409, "invalid_state")           # only dead letters
    (claimed,) = await api.claim([tt])
    await api.call("POST", f"/v1/tasks/{t['task_id']}/fail",
                   {"fencing_token": claimed["fencing_token"], "retryable": False})
    status, kept = await api.call("POST", f"/v1/tasks/{t['task_id']}/discard")
    assert status == 200 and kept["state"] == kept["status"] == "discarded"
    status, got = await api.call("GET", f"/v1/tasks/{t['task_id']}")
    assert status == 200 and got["state"] == "discarded" and len(got["attempts"]) == 2
    status, listed = await api.call("GET", f"/v1/tasks?state=discarded&task_type={tt}")
    assert [x["task_id"] for x in listed["tasks"]] == [t["task_id"]]


async def test_linearizable_read_commits_a_barrier_first(api: Api, tt):
    t = await api.submit(task_type=tt)
    status, got = await api.call("GET", f"/v1/tasks/{t['task_id']}?consistency=linearizable")
    assert status == 200 and got["applied_seq"] > t["applied_seq"]


async def test_min_seq_beyond_the_applied_seq_times_out(api: Api, monkeypatch):
    monkeypatch.setattr(api_reads, "MIN_SEQ_WAIT_S", 0.2)
    status, body = await api.call("GET", "/v1/tasks?min_seq=999999999")
    assert_error(status, body, 504, "timeout")


BAD_SUBMITS = [
    ({}, 400, "invalid_argument"),
    ({"task_type": ""}, 400, "invalid_argument"),
    ({"task_type": 7}, 400, "invalid_argument"),
    ({"task_type": "x" * 129}, 400, "invalid_argument"),
    ({"task_type": "t", "colour": "red"}, 400, "invalid_argument"),
    ({"task_type": "t", "priority": 11}, 400, "invalid_argument"),
    ({"task_type": "t", "priority": -1}, 400, "invalid_argument"),
    ({"task_type": "t", "priority": "5"}, 400, "invalid_argument"),
    ({"task_type": "t", "priority": True}, 400, "invalid_argument"),
    ({"task_type": "t", "priority": 2.5}, 400, "invalid_argument"),
    ({"task_type": "t", "run_at": "tomorrow"}, 400, "invalid_argument"),
    ({"task_type": "t", "run_at": "2030-01-01T00:00:00"}, 400, "invalid_argument"),
    ({"task_type": "t", "run_at": -1}, 400, "invalid_argument"),
    ({"task_type": "t", "run_at": 1e300}, 400, "invalid_argument"),
    ({"task_type": "t", "run_at": 1, "delay_s": 1}, 400, "invalid_argument"),
    ({"task_type": "t", "delay_s": -5}, 400, "invalid_argument"),
    ({"task_type": "t", "delay_s": "5"}, 400, "invalid_argument"),
    ({"task_type": "t", "timeout_s": 0}, 400, "invalid_argument"),
    ({"task_type": "t", "timeout_s": 10 ** 9}, 400, "invalid_argument"),
    ({"task_type": "t", "max_retries": 101}, 400, "invalid_argument"),
    ({"task_type": "t", "max_retries": -1}, 400, "invalid_argument"),
    ({"task_type": "t", "retry": {"backoff": "weird"}}, 400, "invalid_argument"),
    ({"task_type": "t", "retry": {"base_s": 1, "max_s": 0.5}}, 400, "invalid_argument"),
    ({"task_type": "t", "retry": {"jitter": 2}}, 400, "invalid_argument"),
    ({"task_type": "t", "retry": {"multiplier": 0.5}}, 400, "invalid_argument"),
    ({"task_type": "t", "retry": {"tries": 3}}, 400, "invalid_argument"),
    ({"task_type": "t", "retry": "fast"}, 400, "invalid_argument"),
    ({"task_type": "t", "tenant": "a b"}, 400, "invalid_argument"),
    ({"task_type": "t", "tenant": ""}, 400, "invalid_argument"),
    ({"task_type": "t", "tenant": "x" * 65}, 400, "invalid_argument"),
    ({"task_type": "t", "idempotency_key": "k" * 257}, 400, "invalid_argument"),
    ({"task_type": "t", "idempotency_key": 5}, 400, "invalid_argument"),
    ({"task_type": "t", "payload": "x" * 300_000}, 413, "too_large"),
    ({"tasks": []}, 400, "invalid_argument"),
    ({"tasks": {"task_type": "t"}}, 400, "invalid_argument"),
    ({"tasks": [{"task_type": "t"}], "extra": 1}, 400, "invalid_argument"),
    ({"tasks": [{"task_type": "t"}, {"task_type": ""}]}, 400, "invalid_argument"),
    ({"tasks": [{"task_type": "t"}] * 1001}, 413, "too_large"),
    ([{"task_type": "t"}], 400, "invalid_argument"),
    ("t", 400, "invalid_argument"),
]


@pytest.mark.parametrize("body, status, code", BAD_SUBMITS)
async def test_bad_submits_are_refused(api: Api, body, status, code):
    got_status, got = await api.call("POST", "/v1/tasks", body)
    assert_error(got_status, got, status, code)


async def test_malformed_and_oversized_bodies(api: Api):
    status, body = await api.call("POST", "/v1/tasks", raw=b"{not json")
    assert_error(status, body, 400, "invalid_argument")
    status, body = await api.call("POST", "/v1/tasks", raw=b"")
    assert_error(status, body, 400, "invalid_argument")
    big = b'{"task_type": "t", "payload": "' + b"x" * (1024 * 1024 + 10) + b'"}'
    status, body = await api.call("POST", "/v1/tasks", raw=big)
    assert_error(status, body, 413, "too_large")


@pytest.mark.parametrize("path, status, code", [
    ("/v1/tasks/nope", 404, "not_found"),
    ("/v1/tasks/" + "x" * 129, 400, "invalid_argument"),
    ("/v1/tasks/x?min_seq=abc", 400, "invalid_argument"),
    ("/v1/tasks/x?min_seq=-1", 400, "invalid_argument"),
    ("/v1/tasks/x?consistency=strong", 400, "invalid_argument"),
    ("/v1/tasks/x?colour=red", 400, "invalid_argument"),
    ("/v1/tasks?state=done", 400, "invalid_argument"),
    ("/v1/tasks?limit=0", 400, "invalid_argument"),
    ("/v1/tasks?limit=1001", 400, "invalid_argument"),
    ("/v1/tasks?limit=ten", 400, "invalid_argument"),
    ("/v1/tasks?tenant=a%20b", 400, "invalid_argument"),
    ("/v1/tasks?sort=asc", 400, "invalid_argument"),
    ("/v1/tasks?created_after=yesterday", 400, "invalid_argument"),
    ("/v1/tasks?created_after=2026-12-01T15:00:00", 400, "invalid_argument"),   # no offset
    ("/v1/tasks?created_before=-5", 400, "invalid_argument"),
    ("/v1/tasks?created_before=nan", 400, "invalid_argument"),
    ("/v1/tasks?finished_after=1e300", 400, "invalid_argument"),
    ("/v1/tasks?created_after=2000&created_before=1000", 400, "invalid_argument"),
])
async def test_bad_reads_are_refused(api: Api, path, status, code):
    got_status, got = await api.call("GET", path)
    assert_error(got_status, got, status, code)


async def test_bad_cursor_is_refused(api: Api):
    status, body = await api.call("GET", "/v1/tasks?cursor=%%%garbage")
    assert_error(status, body, 400, "invalid_argument")


@pytest.mark.parametrize("action", ["cancel", "replay", "discard"])
async def test_actions_on_unknown_tasks_and_with_fields(api: Api, action, tt):
    status, body = await api.call("POST", f"/v1/tasks/nope-{tt}/{action}")
    assert_error(status, body, 404, "not_found")
    t = await api.submit(task_type=tt, delay_s=600)
    status, body = await api.call("POST", f"/v1/tasks/{t['task_id']}/{action}", {"force": True})
    assert_error(status, body, 400, "invalid_argument")


@pytest.mark.parametrize("query, field", [
    ("created_after=soon", "created_after"), ("created_before=inf", "created_before"),
    ("finished_after=0001-01-01T00:00:00%2B01:00", "finished_after"),
    ("created_after=1700000001&created_before=1700000000", "created_before"),
])
async def test_bad_time_filters_name_their_field(api: Api, query, field):
    status, body = await api.call("GET", f"/v1/tasks?{query}")
    assert_error(status, body, 400, "invalid_argument")
    assert body["error"]["details"]["field"] == field


async def test_a_bounded_page_stops_early_with_a_cursor(api: Api, tt, monkeypatch):
    """A page examines at most task_scan_max tasks (DESIGN 7): a filter with no index of
    its own (here: finished since) may answer fewer than `limit`, even none, with a cursor;
    following it yields every match once."""
    from tsched.node.api import tasks as tasks_api
    monkeypatch.setattr(tasks_api, "API_LIMITS", replace(tasks_api.API_LIMITS, task_scan_max=3))
    ids = [(await api.submit(task_type=tt))["task_id"] for _ in range(12)]
    for tid in (ids[1], ids[9]):
        status, _ = await api.call("POST", f"/v1/tasks/{tid}/cancel")
        assert status == 200
    seen, cursor, pages, empty = [], None, 0, 0
    while True:
        path = f"/v1/tasks?task_type={tt}&finished_after=0&limit=10"
        status, page = await api.call("GET", path + (f"&cursor={cursor}" if cursor else ""))
        assert status == 200, page
        seen += [t["task_id"] for t in page["tasks"]]
        pages, empty = pages + 1, empty + (not page["tasks"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [ids[9], ids[1]] and pages == 4 and empty >= 1


async def test_the_creation_window_lists_the_tasks_created_in_it(api: Api, tt):
    first = await api.submit(task_type=tt)
    created = first["created_at"]
    status, page = await api.call("GET", f"/v1/tasks?task_type={tt}&created_after={created}")
    assert status == 200 and [t["task_id"] for t in page["tasks"]] == [first["task_id"]]
    status, page = await api.call("GET", f"/v1/tasks?task_type={tt}&created_before={created}")
    assert status == 200 and page == {**page, "tasks": [], "next_cursor": None}
    epoch_s = 1_000   # epoch seconds are taken too
    status, page = await api.call("GET", f"/v1/tasks?task_type={tt}&created_after={epoch_s}")
    assert status == 200 and len(page["tasks"]) == 1
