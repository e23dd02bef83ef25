"""Schedule endpoints and the cron preview on a real single-node Raft replica (in process)."""
from __future__ import annotations

import datetime as dt
import uuid

import pytest

from tests.api_support import Api, assert_error


@pytest.fixture
def sid() -> str:
    """A schedule id of this test only: the module shares one replica."""
    return "s-" + uuid.uuid4().hex[:8]


def body(**fields):
    out = {"cron": "*/5 * * * *", "task": {"task_type": "report"}}
    out.update(fields)
    return out


async def put(api: Api, sid: str, **fields):
    status, out = await api.call("PUT", f"/v1/schedules/{sid}", body(**fields))
    assert status == 200, out
    return out


async def test_put_renders_every_field_and_reads_back(api: Api, sid):
    s = await put(api, sid, tenant="acme", timezone="Europe/Berlin",
                  task={"task_type": "report", "payload": {"k": 1}, "priority": 2,
                        "timeout_s": 30, "max_retries": 1},
                  overlap="skip", misfire="run_once", catchup_window_s=120, jitter_s=3,
                  start_at="2026-01-01T00:00:00Z", end_at="2099-01-01T00:00:00Z")
    assert s["schedule_id"] == sid and s["tenant"] == "acme" and s["cron"] == "*/5 * * * *"
    assert s["timezone"] == "Europe/Berlin" and s["overlap"] == "skip"
    assert s["misfire"] == "run_once" and s["catchup_window_s"] == 120 and s["jitter_s"] == 3
    assert s["task"]["payload"] == {"k": 1} and s["task"]["priority"] == 2
    assert s["task"]["timeout_s"] == 30 and s["task"]["max_retries"] == 1
    assert s["paused"] is False and s["fires"] == [] and s["end_at"].startswith("2099-01-01")
    nxt = dt.datetime.fromisoformat(s["next_fire_at"].replace("Z", "+00:00"))
    assert nxt.minute % 5 == 0 and nxt.second == 0
    assert 0 < (nxt - dt.datetime.now(dt.timezone.utc)).total_seconds() <= 300
    for key in ("created_at", "updated_at", "applied_seq"):
        assert s[key]
    status, got = await api.call("GET", f"/v1/schedules/{sid}?tenant=acme&min_seq={s['applied_seq']}")
    assert status == 200 and got["next_fire_at"] == s["next_fire_at"]
    status, _ = await api.call("GET", f"/v1/schedules/{sid}")      # default tenant: not there
    assert status == 404


async def test_a_get_body_can_be_put_back(api: Api, sid):
    s = await put(api, sid)
    status, again = await api.call("PUT", f"/v1/schedules/{sid}", s)
    assert status == 200, again
    assert again["cron"] == s["cron"] and again["created_at"] == s["created_at"]


@pytest.mark.parametrize("fields, field", [
    ({"cron": "0 0 30 2 *"}, "cron"),
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "* * *"}, "cron"),
    ({"cron": ""}, "cron"),
    ({"cron": None}, "cron"),
    ({"cron": 5}, "cron"),
    ({"cron": "x" * 1000}, "cron"),
    ({"timezone": "Mars/Olympus"}, "timezone"),
    ({"timezone": "x" * 200}, "timezone"),
    ({"overlap": "sometimes"}, "overlap"),
    ({"misfire": "never"}, "misfire"),
    ({"catchup_window_s": -1}, "catchup_window_s"),
    ({"catchup_window_s": 10**9}, "catchup_window_s"),
    ({"jitter_s": 10**6}, "jitter_s"),
    ({"paused": "yes"}, "paused"),
    ({"start_at": "tomorrow"}, "start_at"),
    ({"start_at": "2027-01-01T00:00:00Z", "end_at": "2026-01-01T00:00:00Z"}, "end_at"),
    ({"task": {"payload": {}}}, "task.task_type"),
    ({"task": {"task_type": "r", "priority": 11}}, "task.priority"),
    ({"task": {"task_type": "r", "bogus": 1}}, None),
    ({"task": None}, "task"),
    ({"tenant": "no spaces"}, "tenant"),
    ({"color": "blue"}, None),
    ({"schedule_id": "other"}, "schedule_id"),
])
async def test_bad_put_bodies_are_400(api: Api, sid, fields, field):
    status, out = await api.call("PUT", f"/v1/schedules/{sid}", body(**fields))
    assert_error(status, out, 400, "invalid_argument")
    if field is not None:
        assert out["error"]["details"].get("field") == field, out


async def test_non_object_body_and_huge_payload(api: Api, sid):
    status, out = await api.call("PUT", f"/v1/schedules/{sid}", [1, 2])
    assert_error(status, out, 400, "invalid_argument")
    status, out = await api.call("PUT", f"/v1/schedules/{sid}", raw=b"{not json")
    assert_error(status, out, 400, "invalid_argument")
    big = body(task={"task_type": "r", "payload": "x" * 300_000})
    status, out = await api.call("PUT", f"/v1/schedules/{sid}", big)
    assert_error(status, out, 413, "too_large")


async def test_pause_resume_and_delete(api: Api, sid):
    await put(api, sid, cron="* * * * * *")
    status, s = await api.call("POST", f"/v1/schedules/{sid}/pause")
    assert status == 200 and s["paused"] is True
    status, s = await api.call("POST", f"/v1/schedules/{sid}/resume")
    assert status == 200 and s["paused"] is False and s["next_fire_at"] is not None
    status, s = await api.call("DELETE", f"/v1/schedules/{sid}")
    assert status == 200 and s["schedule_id"] == sid
    status, out = await api.call("GET", f"/v1/schedules/{sid}?min_seq={s['applied_seq']}")
    assert_error(status, out, 404, "not_found")
    for action in ("pause", "resume", "trigger"):
        status, out = await api.call("POST", f"/v1/schedules/{sid}/{action}")
        assert_error(status, out, 404, "not_found")
    status, out = await api.call("DELETE", f"/v1/schedules/{sid}")
    assert_error(status, out, 404, "not_found")


async def test_trigger_creates_a_task_now_without_moving_the_next_fire(api: Api, sid):
    s = await put(api, sid, cron="0 0 1 1 *")
    status, t = await api.call("POST", f"/v1/schedules/{sid}/trigger")
    assert status == 200, t
    assert t["next_fire_at"] == s["next_fire_at"]
    task = t["fired_task"]
    assert task["schedule_id"] == sid and task["task_type"] == "report"
    assert [f["outcome"] for f in t["fires"]] == ["ran"] and t["fires"][0]["task_id"] == task["task_id"]
    status, _ = await api.call("POST", f"/v1/schedules/{sid}/pause")
    status, out = await api.call("POST", f"/v1/schedules/{sid}/trigger")
    assert_error(status, out, 409, "invalid_state")


async def test_actions_refuse_bodies_and_unknown_query(api: Api, sid):
    await put(api, sid)
    status, out = await api.call("POST", f"/v1/schedules/{sid}/pause", {"x": 1})
    assert_error(status, out, 400, "invalid_argument")
    status, out = await api.call("POST", f"/v1/schedules/{sid}/pause?bogus=1")
    assert_error(status, out, 400, "invalid_argument")
    status, out = await api.call("GET", f"/v1/schedules/{'x' * 200}")
    assert_error(status, out, 400, "invalid_argument")


async def test_list_pages_through_a_tenant(api: Api):
    tenant = "t" + uuid.uuid4().hex[:8]
    ids = sorted(f"s{i}" for i in range(5))
    for i in ids:
        await put(api, i, tenant=tenant)
    seen, cursor = [], None
    while True:
        path = f"/v1/schedules?tenant={tenant}&limit=2" + (f"&cursor={cursor}" if cursor else "")
        status, page = await api.call("GET", path)
        assert status == 200 and len(page["schedules"]) <= 2
        seen += [s["schedule_id"] for s in page["schedules"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids
    for bad in ("limit=0", "limit=100000", "cursor=junk", "tenant=%20", "bogus=1"):
        status, out = await api.call("GET", f"/v1/schedules?{bad}")
        assert_error(status, out, 400, "invalid_argument")


async def test_preview_in_a_zone_with_offsets(api: Api):
    q = "cron=30+2+*+*+*&timezone=America/New_York&from=2026-03-07T12:00:00Z&count=3"
    status, out = await api.call("GET", f"/v1/cron/preview?{q}")
    assert status == 200, out
    assert out["fires"] == ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00",
                            "2026-03-10T02:30:00-04:00"]
    status, out = await api.call("GET", "/v1/cron/preview?cron=@daily&from=0&count=2")
    assert status == 200 and out["fires"] == ["1970-01-02T00:00:00Z", "1970-01-03T00:00:00Z"]


async def test_preview_hashes_by_the_given_schedule_id(api: Api):
    async def first(extra: str) -> str:
        status, out = await api.call("GET", f"/v1/cron/preview?cron=H+H+*+*+*&from=0&count=1{extra}")
        assert status == 200, out
        return out["fires"][0]
    assert await first("&schedule_id=a") == await first("&schedule_id=a")
    assert len({await first(f"&schedule_id=id{i}") for i in range(8)}) > 1


@pytest.mark.parametrize("query", [
    "cron=0+0+30+2+*", "cron=*+*+*+*+*&timezone=Nowhere/Land", "cron=bad", "",
    "cron=*+*+*+*+*&count=101", "cron=*+*+*+*+*&count=0", "cron=*+*+*+*+*&count=x",
    "cron=*+*+*+*+*&from=nan", "cron=*+*+*+*+*&from=yesterday", "cron=*+*+*+*+*&bogus=1",
])
async def test_preview_refusals_are_400(api: Api, query):
    status, out = await api.call("GET", f"/v1/cron/preview?{query}")
    assert_error(status, out, 400, "invalid_argument")


async def test_preview_count_limit_is_served(api: Api):
    status, out = await api.call("GET", "/v1/cron/preview?cron=*+*+*+*+*+*&count=100")
    assert status == 200 and len(out["fires"]) == 100


async def test_times_at_the_edge_of_the_range_are_not_errors(api: Api, sid):
    status, out = await api.call("GET", "/v1/cron/preview?cron=*+*+*+*+*&from=253402300799")
    assert status == 200 and out["fires"] == []
    s = await put(api, sid, start_at="9999-12-31T23:59:59Z")
    assert s["next_fire_at"] is None
    s = await put(api, sid, end_at="2001-01-01T00:00:00Z")     # over: never fires again
    assert s["next_fire_at"] is None


async def test_a_fire_made_due_by_a_wall_clock_step_is_not_slept_through(api: Api, sid):
    """The leader's clock runs 20 s behind, so the next fire of a 10-second schedule is
    9 s away by its clock; the clock is then corrected, and that fire, already 11 s past
    in real time, must come within the timer's bounded sleep, not after 9 s."""
    import asyncio
    import time
    clock = api.node.clock
    real = clock.now_ms() - clock.offset_ms
    clock.offset_ms = -20_000 - (real - 20_000) % 10_000 + 1_000   # its now ends in x1.000 s
    try:
        s = await put(api, sid, cron="*/10 * * * * *")
        while api.node.timer._changed.is_set():      # the timer has planned its sleep
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        clock.offset_ms = 0
        deadline = time.monotonic() + 5
        while True:
            status, got = await api.call("GET", f"/v1/tasks?schedule_id={sid}")
            assert status == 200, got
            if got["tasks"]:
                break
            assert time.monotonic() < deadline, "the fire waited out a sleep planned on the old clock"
            await asyncio.sleep(0.05)   # polling interval of the wait above
        assert s["next_fire_at"] in {t["run_at"] for t in got["tasks"]}
    finally:
        clock.offset_ms = 0
