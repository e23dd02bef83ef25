"""Worker endpoints: claims (long poll), heartbeats, completions; every bad input's 4xx."""
from __future__ import annotations

import asyncio

import pytest

from tests.api_support import Api, assert_error
from tsched.node.scheduling.claim_request import ClaimRequest


async def test_claim_heartbeat_complete_and_complete_again(api: Api, tt):
    t = await api.submit(task_type=tt, payload={"n": 1})
    (c,) = await api.claim([tt], lease_s=10)
    assert c["task_id"] == t["task_id"] and c["state"] == "running" and c["attempt"] == 1
    assert c["payload"] == {"n": 1} and c["execution_id"] and c["lease_expires_at"]
    tok = c["fencing_token"]
    status, hb = await api.call("POST", f"/v1/tasks/{t['task_id']}/heartbeat",
                                {"fencing_token": tok, "lease_s": 20})
    assert status == 200 and hb["cancel_requested"] is False and hb["lease_expires_at"]
    assert hb["lease_expires_at"] > c["lease_expires_at"]
    status, body = await api.call("POST", f"/v1/tasks/{t['task_id']}/complete",
                                  {"fencing_token": tok - 1, "result": {}})
    assert_error(status, body, 409, "stale_token")
    status, done = await api.call("POST", f"/v1/tasks/{t['task_id']}/complete",
                                  {"fencing_token": tok, "result": {"ok": True}})
    assert status == 200 and done["state"] == "completed" and done["result"] == {"ok": True}
    assert done["attempts"][0]["outcome"] == "completed"
    assert done["attempts"][0]["fencing_token"] == tok
    status, again = await api.call("POST", f"/v1/tasks/{t['task_id']}/complete",
                                   {"fencing_token": tok, "result": {"ok": True}})
    assert status == 200 and again["state"] == "completed"


async def test_empty_long_poll_waits_its_time(api: Api, tt):
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = await api.claim([tt], wait_s=0.3)
    assert tasks == [] and loop.time() - start >= 0.3


async def test_long_poll_is_woken_by_a_submit(api: Api, tt):
    waiting = asyncio.ensure_future(api.claim([tt], wait_s=20))
    await asyncio.sleep(0)  # let the claim reach the server before the submit
    t = await api.submit(task_type=tt)
    tasks = await asyncio.wait_for(waiting, 10)
    assert [x["task_id"] for x in tasks] == [t["task_id"]]


async def test_cancel_of_a_running_task_is_seen_on_heartbeat(api: Api, tt):
    t = await api.submit(task_type=tt)
    (c,) = await api.claim([tt])
    status, got = await api.call("POST", f"/v1/tasks/{t['task_id']}/cancel")
    assert status == 200 and got["cancel_requested"] is True and got["state"] == "running"
    status, hb = await api.call("POST", f"/v1/tasks/{t['task_id']}/heartbeat",
                                {"fencing_token": c["fencing_token"]})
    assert status == 200 and hb["cancel_requested"] is True


async def test_retryable_failure_goes_back_to_pending(api: Api, tt):
    t = await api.submit(task_type=tt, max_retries=2, retry={"backoff": "fixed", "base_s": 30})
    (c,) = await api.claim([tt])
    status, failed = await api.call("POST", f"/v1/tasks/{t['task_id']}/fail",
                                    {"fencing_token": c["fencing_token"], "error": "flaky"})
    assert status == 200 and failed["state"] == "pending" and failed["last_error"] == "flaky"
    assert failed["run_at"] > c["run_at"]
    assert failed["attempts"][0]["outcome"] == "failed"


async def test_batch_completions_and_heartbeats_answer_in_order(api: Api, tt):
    ids = [(await api.submit(task_type=tt))["task_id"] for _ in range(2)]
    claimed = await api.claim([tt], max_tasks=2)
    tok = {c["task_id"]: c["fencing_token"] for c in claimed}
    assert sorted(tok) == sorted(ids)
    status, hbs = await api.call("POST", "/v1/heartbeats", {"heartbeats": [
        {"task_id": ids[0], "fencing_token": tok[ids[0]], "lease_s": 5},
        {"task_id": ids[1], "fencing_token": tok[ids[1]] + 1000}]})
    assert status == 200
    assert hbs["results"][0]["task_id"] == ids[0] and "lease_expires_at" in hbs["results"][0]
    assert hbs["results"][1]["error"]["code"] == "stale_token"
    status, out = await api.call("POST", "/v1/completions", {"completions": [
        {"task_id": ids[0], "fencing_token": tok[ids[0]], "result": 1},
        {"task_id": ids[1], "fencing_token": tok[ids[1]], "error": "no", "retryable": False},
        {"task_id": "nope", "fencing_token": 1, "result": None}]})
    assert status == 200
    r = out["results"]
    assert r[0]["state"] == "completed" and r[0]["result"] == 1
    assert r[1]["state"] == "dead_letter"
    assert r[2]["error"]["code"] == "not_found"


BAD_CLAIMS = [
    {"task_types": ["t"]},
    {"worker_id": "", "task_types": ["t"]},
    {"worker_id": "w"},
    {"worker_id": "w", "task_types": []},
    {"worker_id": "w", "task_types": "t"},
    {"worker_id": "w", "task_types": [""]},
    {"worker_id": "w", "task_types": [f"t{i}" for i in range(51)]},
    {"worker_id": "w", "task_types": ["t"], "max_tasks": 0},
    {"worker_id": "w", "task_types": ["t"], "max_tasks": 101},
    {"worker_id": "w", "task_types": ["t"], "wait_s": 61},
    {"worker_id": "w", "task_types": ["t"], "wait_s": -1},
    {"worker_id": "w", "task_types": ["t"], "lease_s": 0},
    {"worker_id": "w", "task_types": ["t"], "lease_s": 3601},
    {"worker_id": "w", "task_types": ["t"], "prefetch_ms": 1001},
    {"worker_id": "w", "task_types": ["t"], "prefetch_ms": 1.5},
    {"worker_id": "w", "task_types": ["t"], "tenant": "x"},
]


@pytest.mark.parametrize("body", BAD_CLAIMS)
async def test_bad_claims_are_refused(api: Api, body):
    status, got = await api.call("POST", "/v1/claims", body)
    assert_error(status, got, 400, "invalid_argument")


@pytest.mark.parametrize("verb, body, status, code", [
    ("heartbeat", {}, 400, "invalid_argument"),
    ("heartbeat", {"fencing_token": "1"}, 400, "invalid_argument"),
    ("heartbeat", {"fencing_token": 1, "lease_s": 0}, 400, "invalid_argument"),
    ("heartbeat", {"fencing_token": 1, "extra": 1}, 400, "invalid_argument"),
    ("complete", {"result": {}}, 400, "invalid_argument"),
    ("complete", {"fencing_token": 1, "result": "x" * 300_000}, 413, "too_large"),
    ("complete", {"fencing_token": 1, "error": "e"}, 400, "invalid_argument"),
    ("fail", {"fencing_token": 1, "retryable": "yes"}, 400, "invalid_argument"),
    ("fail", {"fencing_token": 1, "error": "e" * 8193}, 413, "too_large"),
    ("fail", {"fencing_token": 1, "error": "\u00e9" * 4097}, 413, "too_large"),   # bytes count
    ("fail", {"fencing_token": 1, "result": {}}, 400, "invalid_argument"),
])
async def test_bad_worker_calls_are_refused(api: Api, tt, verb, body, status, code):
    t = await api.submit(task_type=tt)
    got_status, got = await api.call("POST", f"/v1/tasks/{t['task_id']}/{verb}", body)
    assert_error(got_status, got, status, code)


async def test_worker_calls_on_unknown_or_unclaimed_tasks(api: Api, tt):
    for verb in ("heartbeat", "complete", "fail"):
        status, body = await api.call("POST", f"/v1/tasks/nope-{tt}/{verb}", {"fencing_token": 1})
        assert_error(status, body, 404, "not_found")
    t = await api.submit(task_type=tt)
    status, body = await api.call("POST", f"/v1/tasks/{t['task_id']}/complete",
                                  {"fencing_token": 1})
    assert status == 409 and body["error"]["code"] in ("stale_token", "invalid_state")


@pytest.mark.parametrize("path, body, status, code", [
    ("/v1/completions", {}, 400, "invalid_argument"),
    ("/v1/completions", {"completions": []}, 400, "invalid_argument"),
    ("/v1/completions", {"completions": [{"task_id": "a"}]}, 400, "invalid_argument"),
    ("/v1/completions", {"completions": [{"task_id": "a", "fencing_token": 1,
                                          "result": 1, "error": "x"}]}, 400, "invalid_argument"),
    ("/v1/completions", {"completions": [{"task_id": "a", "fencing_token": 1}] * 1001},
     413, "too_large"),
    ("/v1/heartbeats", {"heartbeats": "all"}, 400, "invalid_argument"),
    ("/v1/heartbeats", {"heartbeats": [{"fencing_token": 1}]}, 400, "invalid_argument"),
    ("/v1/heartbeats", {"heartbeats": [{"task_id": "a", "fencing_token": 1, "x": 1}]},
     400, "invalid_argument"),
])
async def test_bad_batches_are_refused(api: Api, path, body, status, code):
    got_status, got = await api.call("POST", path, body)
    assert_error(got_status, got, status, code)


async def test_a_vanished_long_poll_does_not_hold_work(api: Api, tt):
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    body = ('{"worker_id": "gone", "task_types": ["%s"], "wait_s": 30}' % tt).encode()
    writer.write(b"POST /v1/claims HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while api.node.claims.waiting < 1:
        assert loop.time() < deadline, "the claim never started waiting"
        await asyncio.sleep(0.005)
    writer.close()
    await writer.wait_closed()
    t = await api.submit(task_type=tt)
    (got,) = await api.claim([tt], wait_s=5)
    assert got["task_id"] == t["task_id"] and got["worker_id"] == "w1"


async def test_a_claim_committed_for_a_gone_waiter_is_released(api: Api, tt):
    req = ClaimRequest(worker_id="gone", task_types=(tt,), wait_s=30)
    waiting = asyncio.ensure_future(api.node.claims.wait(req, 30, lambda: True))
    t = await api.submit(task_type=tt)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while True:
        status, got = await api.call("GET", f"/v1/tasks/{t['task_id']}")
        if got["attempts"] and got["attempts"][-1]["outcome"] == "released":
            break
        assert loop.time() < deadline, got["attempts"]
        await asyncio.sleep(0.01)
    assert got["state"] == "pending" and got["attempts"][-1]["worker_id"] == "gone"
    (again,) = await api.claim([tt])
    assert again["task_id"] == t["task_id"] and again["worker_id"] == "w1"
    waiting.cancel()


async def test_release_gives_a_task_back_without_using_a_retry(api: Api, tt):
    t = await api.submit(task_type=tt, max_retries=0)
    (c,) = await api.claim([tt])
    status, body = await api.call("POST", f"/v1/tasks/{t['task_id']}/release",
                                  {"fencing_token": c["fencing_token"] + 1})
    assert_error(status, body, 409, "stale_token")
    status, body = await api.call("POST", f"/v1/tasks/{t['task_id']}/release", {})
    assert_error(status, body, 400, "invalid_argument")
    status, back = await api.call("POST", f"/v1/tasks/{t['task_id']}/release",
                                  {"fencing_token": c["fencing_token"]})
    assert status == 200 and back["state"] == "pending"
    assert back["attempts"][-1]["outcome"] == "released"
    (again,) = await api.claim([tt])         # max_retries 0, yet claimable again
    assert again["task_id"] == t["task_id"]
    assert again["fencing_token"] > c["fencing_token"]


async def test_answers_carry_applied_seq_in_body_and_header(api: Api, tt):
    resp = await api.client.post("/v1/tasks", json={"task_type": tt})
    body = await resp.json()
    assert int(resp.headers["X-Applied-Seq"]) == body["applied_seq"] >= 1
    resp = await api.client.get("/v1/tasks/nope")
    body = await resp.json()
    assert resp.status == 404 and int(resp.headers["X-Applied-Seq"]) == body["applied_seq"]


async def test_one_submit_wakes_one_of_many_idle_waiters(api: Api, tt):
    hub = api.node.claims
    req = ClaimRequest(worker_id="herd", task_types=(tt,), wait_s=5)
    waits = [asyncio.ensure_future(hub.wait(req, 5, lambda: False)) for _ in range(5)]
    await asyncio.sleep(0)        # all five register (nothing is claimable yet)
    proposed = hub.stats.proposed
    await api.submit(task_type=tt)
    done, pending = await asyncio.wait(waits, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    assert len(done) == 1 and len(done.pop().result()[0]) == 1
    assert hub.stats.proposed - proposed == 1     # not one Claim per idle waiter
    for w in pending:
        w.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def test_a_backlog_is_drained_by_every_waiter(api: Api, tt):
    status, _ = await api.call("POST", "/v1/tasks", {"tasks": [{"task_type": tt}] * 20})
    assert status == 201
    claims = await asyncio.gather(*(api.claim([tt], max_tasks=4, wait_s=5) for _ in range(5)))
    ids = [t["task_id"] for got in claims for t in got]
    assert len(ids) == len(set(ids)) == 20 and all(len(got) == 4 for got in claims)


async def test_an_answer_arriving_with_the_wait_timeout_is_not_lost(api: Api, tt):
    """Python 3.11's wait_for drops a result that lands in the loop iteration of its
    timeout; claimed tasks would then sit leased to nobody until the lease expired."""
    import time
    hub = api.node.claims
    req = ClaimRequest(worker_id="race-" + tt, task_types=(tt,), wait_s=0.05)
    waiting = asyncio.ensure_future(hub.wait(req, req.wait_s, lambda: False))
    await asyncio.sleep(0)
    (waiter,) = [w for w in hub._waiters.values() if w.claim.worker_id == req.worker_id]
    # The answer is due just after the wait's own timeout; the loop stalls past both, so
    # they run in one iteration, the timeout first.
    asyncio.get_running_loop().call_later(0.05, waiter.future.set_result,
                                          ([{"task_id": "x"}], 7))
    time.sleep(0.1)
    assert await waiting == ([{"task_id": "x"}], 7)


async def test_a_task_falling_due_reaches_a_waiter_whose_last_claim_was_empty(api: Api, tt):
    """A waiter whose Claim came back empty waits for new work; a task falling due by the
    leader's timer is new work, not only a submit."""
    import datetime as dt
    hub = api.node.claims
    run_at = dt.datetime.fromtimestamp(api.node.clock.now_ms() / 1000 + 0.4, dt.timezone.utc)
    task = await api.submit(task_type=tt, run_at=run_at.isoformat().replace("+00:00", "Z"))
    req = ClaimRequest(worker_id="due-" + tt, task_types=(tt,), wait_s=3)
    waiting = asyncio.ensure_future(hub.wait(req, req.wait_s, lambda: False))
    await asyncio.sleep(0)
    (waiter,) = [w for w in hub._waiters.values() if w.claim.worker_id == req.worker_id]
    waiter.blocked = True      # as after a Claim that found nothing
    got, _ = await waiting
    assert [t["task_id"] for t in got] == [task["task_id"]]


async def test_failpoint_accept_stale_tokens_lets_a_stale_completion_through(api: Api, tt,
                                                                          monkeypatch):
    """The fault harness proves it can see a zombie's accepted result with this failpoint."""
    from tsched.node.failpoints import Failpoints
    t = await api.submit(task_type=tt)
    (c,) = await api.claim([tt], lease_s=10)
    monkeypatch.setattr(api.node.replica, "failpoints", Failpoints.of("accept_stale_tokens"))
    status, done = await api.call("POST", f"/v1/tasks/{t['task_id']}/complete",
                                  {"fencing_token": c["fencing_token"] - 1, "result": {}})
    assert status == 200 and done["state"] == "completed", done


# --- a claim carrying the completions of the last batch -------------------------------------

def _done(tasks, result=None):
    return [{"task_id": t["task_id"], "fencing_token": t["fencing_token"], "result": result}
            for t in tasks]


async def test_a_claim_carries_the_last_batchs_completions_and_answers_both(api: Api, tt):
    status, _ = await api.call("POST", "/v1/tasks", {"tasks": [{"task_type": tt}] * 4})
    assert status == 201
    first = await api.claim([tt], max_tasks=2)
    proposed = api.node.proposer.entries_proposed
    status, out = await api.call("POST", "/v1/claims", {
        "worker_id": "w1", "task_types": [tt], "max_tasks": 2,
        "completions": _done(first[:1], {"ok": 1}) + [
            {"task_id": first[1]["task_id"], "fencing_token": first[1]["fencing_token"],
             "error": "boom", "retryable": False}]})
    assert status == 200, out
    assert [r["state"] for r in out["completions"]] == ["completed", "dead_letter"]
    assert out["completions"][0]["result"] == {"ok": 1}
    assert len(out["tasks"]) == 2 and not {t["task_id"] for t in out["tasks"]} & {
        t["task_id"] for t in first}
    assert api.node.proposer.entries_proposed - proposed == 1   # one Raft entry for all


async def test_completions_apply_before_the_claim_in_its_entry(api: Api, tt):
    """A tenant at its running limit: the completion frees the slot the Claim then uses."""
    tenant = "lim-" + tt
    status, _ = await api.call("PUT", f"/v1/tenants/{tenant}", {"max_running": 1})
    assert status == 200
    for _ in range(2):
        await api.submit(task_type=tt, tenant=tenant)
    (held,) = await api.claim([tt], max_tasks=5)
    assert await api.claim([tt], max_tasks=5) == []      # the tenant's one slot is taken
    status, out = await api.call("POST", "/v1/claims", {
        "worker_id": "w1", "task_types": [tt], "max_tasks": 5, "completions": _done([held])})
    assert status == 200 and out["completions"][0]["state"] == "completed"
    assert len(out["tasks"]) == 1 and out["tasks"][0]["task_id"] != held["task_id"]


async def test_completions_are_answered_when_nothing_is_claimable(api: Api, tt):
    """The Claim that went with them came back empty: the waiter waits on (a long poll)."""
    await api.submit(task_type=tt)
    (held,) = await api.claim([tt])
    status, out = await api.call("POST", "/v1/claims", {
        "worker_id": "w1", "task_types": [tt], "wait_s": 0.2,
        "completions": _done([held]) + _done([held])})
    assert status == 200 and out["tasks"] == []
    assert out["completions"][0]["state"] == "completed"
    assert out["completions"][1]["state"] == "completed"   # a repeat is answered, harmless
    status, out = await api.call("POST", "/v1/claims", {
        "worker_id": "w1", "task_types": [tt], "completions": [
            {"task_id": held["task_id"], "fencing_token": held["fencing_token"] + 1, "result": 1}]})
    assert status == 200 and out["completions"][0]["error"]["code"] == "stale_token"


async def test_a_claim_without_completions_answers_as_before(api: Api, tt):
    await api.submit(task_type=tt)
    status, out = await api.call("POST", "/v1/claims", {"worker_id": "w1", "task_types": [tt]})
    assert status == 200 and set(out) == {"tasks", "applied_seq"} and len(out["tasks"]) == 1
    status, out = await api.call("POST", "/v1/claims", {"worker_id": "w1", "task_types": [tt],
                                                        "completions": []})
    assert status == 200 and out["completions"] == [] and out["tasks"] == []


@pytest.mark.parametrize("completions, status, code", [
    ({"task_id": "x"}, 400, "invalid_argument"),
    ([{"task_id": "x"}], 400, "invalid_argument"),                       # no fencing_token
    ([{"task_id": "x", "fencing_token": 1, "result": 1, "error": "e"}], 400, "invalid_argument"),
    ([{"task_id": "x", "fencing_token": 1, "bogus": 1}], 400, "invalid_argument"),
    ([{"task_id": "x", "fencing_token": 1}] * 1001, 413, "too_large"),
])
async def test_bad_completions_in_a_claim_are_refused_before_anything_applies(
        api: Api, tt, completions, status, code):
    await api.submit(task_type=tt)
    got_status, body = await api.call("POST", "/v1/claims", {
        "worker_id": "w1", "task_types": [tt], "completions": completions})
    assert_error(got_status, body, status, code)
    assert len(await api.claim([tt])) == 1          # the refused claim took nothing


@pytest.mark.parametrize("prefer, minimal", [
    ("return=minimal", True),
    ('respond-async, RETURN="Minimal"; x=y', True),
    ("return=representation", False),
    ("handling=lenient", False),
    ("return=minimal, " + "x" * 1100, False),      # past PREFER_BYTES_MAX: ignored
])
async def test_prefer_return_minimal_is_parsed_as_rfc_7240_says(api: Api, tt, prefer, minimal):
    (made,) = (await api.call("POST", "/v1/tasks", {"tasks": [{"task_type": tt}]},
                              headers={"Prefer": prefer}))[1]["tasks"]
    assert ("payload" not in made) is minimal and made["state"] == "pending"
    (c,) = await api.claim([tt])
    resp = await api.client.post("/v1/completions", headers={"Prefer": prefer}, json={
        "completions": [{"task_id": c["task_id"], "fencing_token": c["fencing_token"]}]})
    (done,) = (await resp.json())["results"]
    assert (resp.headers.get("Preference-Applied") == "return=minimal") is minimal
    assert done["state"] == "completed" and ("attempts" not in done) is minimal


async def test_a_head_read_answers_the_most_urgent_priority_at_once_and_leases_nothing(
        api: Api, tt):
    """`X-Tsched-Claim-Head: 1` (a sharded node's router, DESIGN 13): no wait, no lease;
    bad input is refused as for a claim, and completions are refused naming the field."""
    head = {"X-Tsched-Claim-Head": "1"}
    claim = {"worker_id": "w1", "task_types": [tt], "wait_s": 30}
    loop = asyncio.get_running_loop()
    start = loop.time()
    status, body = await api.call("POST", "/v1/claims", claim, headers=head)
    assert status == 200 and body["tasks"] == [] and body["head"] is None
    assert loop.time() - start < 25          # answered at once, not after its wait_s
    t = await api.submit(task_type=tt, priority=7)
    await api.submit(task_type=tt, priority=4, delay_s=3600)   # not due: not a head
    status, body = await api.call("POST", "/v1/claims", claim, headers=head)
    assert status == 200 and body["head"] == 7
    status, body = await api.call("POST", "/v1/claims", {**claim, "priority_max": 6},
                                  headers=head)
    assert status == 200 and body["head"] is None
    status, body = await api.call("POST", "/v1/claims", {**claim, "max_tasks": 0},
                                  headers=head)
    assert_error(status, body, 400, "invalid_argument")
    status, body = await api.call("POST", "/v1/claims", {**claim, "completions": [
        {"task_id": t["task_id"], "fencing_token": 1, "result": None}]}, headers=head)
    assert_error(status, body, 400, "invalid_argument")
    assert body["error"]["details"]["field"] == "completions"
    (c,) = await api.claim([tt])
    assert c["task_id"] == t["task_id"] and c["attempt"] == 1


async def test_a_weighted_head_read_answers_the_most_urgent_of_its_tiers(api: Api, tt):
    """A weighted claim takes from its named tiers only, so its head is theirs."""
    head = {"X-Tsched-Claim-Head": "1"}
    claim = {"worker_id": "w1", "task_types": [tt], "wait_s": 30}
    await api.submit(task_type=tt, priority=2)     # high
    await api.submit(task_type=tt, priority=8)     # low
    status, body = await api.call("POST", "/v1/claims",
                                  {**claim, "tier_weights": {"normal": 3, "low": 1}},
                                  headers=head)
    assert status == 200 and body["head"] == 8
    status, body = await api.call("POST", "/v1/claims",
                                  {**claim, "tier_weights": {"high": 1, "low": 1}},
                                  headers=head)
    assert status == 200 and body["head"] == 2
    status, body = await api.call("POST", "/v1/claims",
                                  {**claim, "tier_weights": {"critical": 1}}, headers=head)
    assert status == 200 and body["head"] is None


# --- worker sessions (DESIGN 9) -----------------------------------------------------------

async def test_a_session_is_opened_kept_and_ended_and_bad_input_refused(api: Api, tt):
    worker = f"sess-{tt}"
    status, body = await api.call("PUT", f"/v1/sessions/{worker}", {"timeout_s": 5})
    assert status == 200 and body["created"] is True and body["timeout_s"] == 5
    status, kept = await api.call("PUT", f"/v1/sessions/{worker}", {"timeout_s": 5})
    assert status == 200 and kept["created"] is False
    assert kept["applied_seq"] == body["applied_seq"]   # a keepalive writes nothing
    status, listed = await api.call("GET", "/v1/sessions")
    mine = [s for s in listed["sessions"] if s["worker_id"] == worker]
    assert status == 200 and mine[0]["silent_s"] is not None   # this node leads
    for bad in ({"timeout_s": 0.5}, {"timeout_s": 61}, {"timeout_s": "5"}, {"ttl": 5}, [1]):
        status, err = await api.call("PUT", f"/v1/sessions/{worker}", bad)
        assert_error(status, err, 400, "invalid_argument")
    status, err = await api.call("PUT", f"/v1/sessions/{'x' * 200}", {})
    assert_error(status, err, 400, "invalid_argument")
    status, gone = await api.call("DELETE", f"/v1/sessions/{worker}")
    assert status == 200 and gone["given_back"] == 0
    status, err = await api.call("DELETE", f"/v1/sessions/{worker}")
    assert_error(status, err, 404, "not_found")


async def test_a_silent_sessions_tasks_are_given_back_at_once(api: Api, tt):
    worker = f"silent-{tt}"
    status, _ = await api.call("PUT", f"/v1/sessions/{worker}", {"timeout_s": 1})
    assert status == 200
    t = await api.submit(task_type=tt)
    status, body = await api.call("POST", "/v1/claims", {
        "worker_id": worker, "task_types": [tt], "lease_s": 600})
    assert status == 200 and body["tasks"][0]["task_id"] == t["task_id"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10     # far under the 600 s lease
    while True:
        status, got = await api.call("GET", f"/v1/tasks/{t['task_id']}")
        if got["state"] == "pending":
            break
        assert loop.time() < deadline, got
        await asyncio.sleep(0.05)
    assert (got["attempts"][-1]["outcome"], got["attempts"][-1]["error"]) == (
        "lease_expired", "worker session expired")
    status, listed = await api.call("GET", "/v1/sessions")
    assert worker not in [s["worker_id"] for s in listed["sessions"]]
async def test_heartbeat_progress_is_shown_by_the_task_until_its_attempt_ends(api: Api, tt):
    t = await api.submit(task_type=tt)
    (c,) = await api.claim([tt])
    tid, tok = t["task_id"], c["fencing_token"]
    status, got = await api.call("GET", f"/v1/tasks/{tid}")
    assert status == 200 and got["progress"] is None
    status, _ = await api.call("POST", f"/v1/tasks/{tid}/heartbeat",
                               {"fencing_token": tok, "progress": {"fraction": 0.5,
                                                                   "message": "half"}})
    assert status == 200
    status, got = await api.call("GET", f"/v1/tasks/{tid}")
    assert got["progress"]["fraction"] == 0.5 and got["progress"]["message"] == "half"
    assert got["progress"]["at"]
    status, out = await api.call("POST", "/v1/heartbeats", {"heartbeats": [
        {"task_id": tid, "fencing_token": tok, "progress": {"fraction": 1}}]})
    assert status == 200 and "lease_expires_at" in out["results"][0]
    status, got = await api.call("GET", f"/v1/tasks/{tid}")
    assert got["progress"] == {**got["progress"], "fraction": 1, "message": ""}
    await api.call("POST", f"/v1/tasks/{tid}/complete", {"fencing_token": tok})
    status, got = await api.call("GET", f"/v1/tasks/{tid}")
    assert got["state"] == "completed" and got["progress"] is None


@pytest.mark.parametrize("progress, field", [
    ({"fraction": 1.5}, "progress.fraction"), ({"fraction": -0.1}, "progress.fraction"),
    ({"fraction": "half"}, "progress.fraction"), ({"fraction": True}, "progress.fraction"),
    ({"message": "no fraction"}, "progress.fraction"),
    ({"fraction": 0.5, "message": "x" * 201}, "progress.message"),
    ({"fraction": 0.5, "message": 3}, "progress.message"),
    (0.5, None), ({"fraction": 0.5, "eta_s": 3}, None),
])
async def test_bad_progress_is_a_400_naming_it(api: Api, tt, progress, field):
    t = await api.submit(task_type=tt)
    (c,) = await api.claim([tt])
    status, body = await api.call("POST", f"/v1/tasks/{t['task_id']}/heartbeat",
                                  {"fencing_token": c["fencing_token"], "progress": progress})
    assert_error(status, body, 400, "invalid_argument")
    if field is not None:
        assert body["error"]["details"]["field"] == field
    status, body = await api.call("POST", "/v1/heartbeats", {"heartbeats": [
        {"task_id": t["task_id"], "fencing_token": c["fencing_token"], "progress": progress}]})
    assert_error(status, body, 400, "invalid_argument")
