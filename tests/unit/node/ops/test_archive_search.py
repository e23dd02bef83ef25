"""`GET /v1/archive` and the search under it (DESIGN 14.3): filters, bounds on days, lines
and records, the cursor, damaged files, and every bad input a 4xx naming its field."""
from __future__ import annotations

import dataclasses
import gzip

import orjson
import pytest

from tests.api_support import Api, assert_error
from tsched.node.api import archive as archive_api
from tsched.node.api.auth import Identity, _authorize
from tsched.node.errors import ApiError
from tsched.node.ops import archive_search as arch
from tsched.statemachine.archive_format import DAY_MS, file_name

T0 = 1_767_225_600_000      # 2026-01-01T00:00:00Z


def stamp(ms: int) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def task(tid: str, tenant: str = "acme", done_ms: int = T0, **extra) -> dict:
    return {"task_id": tid, "tenant": tenant, "task_type": "t", "state": "completed",
            "completed_at": stamp(done_ms), **extra}


def write(directory, now_ms: int, tasks: list[dict]) -> None:
    """One gzip member, as node/ops/archiver.py appends for one evicting Tick."""
    lines = b"".join(orjson.dumps({"v": 1, "archived_at": stamp(now_ms), "task": t}) + b"\n"
                     for t in tasks)
    with open(directory / file_name(now_ms), "ab") as f:
        f.write(gzip.compress(lines))


def ids(page: arch.Page) -> list[str]:
    return [r["task"]["task_id"] for r in page.records]


def every_page(directory, **query) -> tuple[list[str], int]:
    """All the ids a search yields following its positions, and the number of pages."""
    out, start, pages = [], None, 0
    while True:
        page = arch.search(directory, arch.Search(**query, start=start))
        out += ids(page)
        pages += 1
        if page.next is None:
            return out, pages
        start = page.next


def test_filters_and_days_before_from_are_not_read(tmp_path):
    write(tmp_path, T0, [task("a"), task("b", tenant="beta")])
    write(tmp_path, T0 + DAY_MS, [task("c", done_ms=T0 + DAY_MS), task("d", tenant="beta")])
    assert ids(arch.search(tmp_path, arch.Search(tenant="acme"))) == ["a", "c"]
    assert ids(arch.search(tmp_path, arch.Search(task_id="d"))) == ["d"]
    later = arch.search(tmp_path, arch.Search(tenant="acme", from_ms=T0 + DAY_MS))
    assert ids(later) == ["c"] and later.lines == 2        # the first day's file unread
    assert ids(arch.search(tmp_path, arch.Search(tenant="acme", to_ms=T0 + 1))) == ["a"]
    assert ids(arch.search(tmp_path, arch.Search(tenant="nobody"))) == []
    assert arch.search(tmp_path / "missing", arch.Search(tenant="acme")).records == []


def test_pages_follow_positions_through_members_and_days_each_record_once(tmp_path):
    want = []
    for day in range(3):
        for member in range(4):
            batch = [task(f"d{day}m{member}x{i}") for i in range(5)]
            want += [t["task_id"] for t in batch]
            write(tmp_path, T0 + day * DAY_MS + member, batch)
    for limit in (1, 3, 7, 100):
        got, pages = every_page(tmp_path, tenant="acme", limit=limit)
        assert got == want, limit
        assert pages >= len(want) // limit


def test_days_and_lines_read_per_request_are_bounded(tmp_path):
    for day in range(4):
        write(tmp_path, T0 + day * DAY_MS, [task(f"x{day}", tenant="other")])
    write(tmp_path, T0 + 4 * DAY_MS, [task("late")])
    page = arch.search(tmp_path, arch.Search(tenant="acme"), days_max=2)
    assert page.records == [] and page.next == arch.Position("2026-01-03")
    page = arch.search(tmp_path, arch.Search(tenant="acme", start=page.next), days_max=2)
    assert page.records == [] and page.next == arch.Position("2026-01-05")
    page = arch.search(tmp_path, arch.Search(tenant="acme", start=page.next), days_max=2)
    assert ids(page) == ["late"] and page.next is None
    page = arch.search(tmp_path, arch.Search(tenant="acme"), lines_max=3)
    assert page.lines == 3 and page.records == [] and page.next.day == "2026-01-04"


def test_a_page_holds_a_task_once_its_last_copy(tmp_path):
    write(tmp_path, T0, [task("a", attempt=1), task("b")])
    write(tmp_path, T0, [task("a", attempt=2)])      # a replayed Tick
    page = arch.search(tmp_path, arch.Search(tenant="acme"))
    assert ids(page) == ["b", "a"] and page.records[1]["task"]["attempt"] == 2


def test_long_lines_cross_read_chunks(tmp_path):
    big = "y" * (3 * arch.CHUNK_BYTES)
    write(tmp_path, T0, [task("a", result=big), task("b", result=big)])
    write(tmp_path, T0, [task("c", result=big)])
    got, _ = every_page(tmp_path, tenant="acme", limit=1)
    assert got == ["a", "b", "c"]


def test_damaged_files_are_named_and_the_records_before_the_damage_kept(tmp_path):
    write(tmp_path, T0, [task("a")])
    path = tmp_path / file_name(T0)
    whole = path.read_bytes()
    write(tmp_path, T0, [task("b")])
    path.write_bytes(path.read_bytes()[: len(whole) + 10])           # second member cut
    (tmp_path / file_name(T0 + DAY_MS)).write_bytes(b"not gzip at all")
    # (a line without the tenant's bytes is never parsed: this one has them)
    (tmp_path / file_name(T0 + 2 * DAY_MS)).write_bytes(gzip.compress(b'{"tenant":"acme"}\n'))
    write(tmp_path, T0 + 3 * DAY_MS, [task("d")])
    page = arch.search(tmp_path, arch.Search(tenant="acme"))
    assert ids(page) == ["a", "d"]
    reasons = {s["file"]: s["reason"] for s in page.skipped}
    assert "truncated" in reasons[file_name(T0)]
    assert "not gzip" in reasons[file_name(T0 + DAY_MS)]
    assert "not an archive record" in reasons[file_name(T0 + 2 * DAY_MS)]


# --- over HTTP --------------------------------------------------------------------------------

@pytest.fixture
def archiving(api: Api, tmp_path):
    before = api.node.config
    api.node.config = dataclasses.replace(before, archive_dir=str(tmp_path))
    yield api, tmp_path
    api.node.config = before


async def test_without_archive_the_answer_names_it(api: Api):
    status, body = await api.call("GET", "/v1/archive?tenant=acme")
    assert_error(status, body, 404, "archive_not_configured")


async def test_search_over_http_pages_with_the_cursor(archiving):
    api, directory = archiving
    write(directory, T0, [task(f"a{i}") for i in range(5)] + [task("z", tenant="beta")])
    seen, cursor = [], None
    while True:
        path = "/v1/archive?tenant=acme&limit=2" + (f"&cursor={cursor}" if cursor else "")
        status, body = await api.call("GET", path)
        assert status == 200, body
        assert body["node"] == "n1" and body["skipped"] == []
        assert all(set(r) == {"v", "archived_at", "task"} for r in body["records"])
        seen += [r["task"]["task_id"] for r in body["records"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"a{i}" for i in range(5)]
    status, body = await api.call("GET", "/v1/archive?task_id=z")
    assert [r["task"]["tenant"] for r in body["records"]] == ["beta"]


async def test_a_day_names_the_whole_day(archiving):
    api, directory = archiving
    write(directory, T0 + DAY_MS, [task("early", done_ms=T0), task("mid", done_ms=T0 + 1000),
                                   task("next", done_ms=T0 + DAY_MS)])
    for query in ("from=2026-01-01&to=2026-01-01", "from=2026-01-01T00:00:00Z&to=2026-01-01", "from=2026-01-01&to=2026-01-02T00:00:00Z",
                  f"from={T0 // 1000}&to={(T0 + DAY_MS) // 1000}"):
        status, body = await api.call("GET", f"/v1/archive?tenant=acme&{query}")
        assert status == 200, body
        assert [r["task"]["task_id"] for r in body["records"]] == ["early", "mid"], query


@pytest.mark.parametrize("query, field", [
    ("tenant=acme&state=done", None),
    ("", None), ("tenant=acme&task_id=x", None),
    ("tenant=bad%20name", "tenant"), ("task_id=" + "x" * 300, "task_id"),
    ("tenant=acme&from=yesterday", "from"), ("tenant=acme&to=2026-02-30", "to"),
    ("tenant=acme&from=2026-01-01T00:00:00", "from"),
    ("tenant=acme&from=2026-01-03&to=2026-01-01", "to"),
    ("tenant=acme&limit=0", "limit"), ("tenant=acme&limit=1001", "limit"),
    ("tenant=acme&cursor=%21%21", "cursor"), ("tenant=acme&cursor=" + "e" * 600, "cursor"),
    ("tenant=acme&cursor=eyJhIjoxfQ", "cursor"),
])
async def test_bad_input_is_400_naming_the_field(archiving, query, field):
    api, _ = archiving
    status, body = await api.call("GET", f"/v1/archive?{query}")
    assert_error(status, body, 400, "invalid_argument")
    details = body["error"]["details"]
    if field is not None:
        assert details["field"] == field, body
    else:
        assert details["fields"], body


async def test_a_cursor_of_another_node_is_refused(archiving):
    api, _ = archiving
    other = dataclasses.replace(api.node, node_id="n2")
    cursor = archive_api.encode_cursor(other, arch.Position("2026-01-01", 0, 3))
    status, body = await api.call("GET", f"/v1/archive?tenant=acme&cursor={cursor}")
    assert_error(status, body, 400, "invalid_argument")
    assert body["error"]["details"]["field"] == "cursor" and "n2" in body["error"]["message"]


def test_only_an_admin_token_may_search(api: Api):
    class Request:
        method, path = "GET", "/v1/archive"
    _authorize(Request(), Identity("admin"))
    with pytest.raises(ApiError) as refused:
        _authorize(Request(), Identity("tenant", "acme"))
    assert refused.value.code == "forbidden"
