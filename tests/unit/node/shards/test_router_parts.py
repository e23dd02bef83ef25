"""The router's pure parts: min_seq pairs, merged metrics, summed stats, the listing
cursor, and the client's per-shard sequence tracking (DESIGN.md section 13)."""
from __future__ import annotations

import httpx
import pytest

from tsched.client._core import SeqTracker
from tsched.node.shards import merge as router_merge
from tsched.node.api.jsonio import status_of
from tsched.node.errors import ApiError
from tsched.node.shards.router import parse_min_seqs


def test_min_seq_pairs_parse_and_bad_ones_are_invalid_argument():
    assert parse_min_seqs("0:5,3:17") == {0: 5, 3: 17}
    for bad in ("0:5,x:1", "1:", ":2", "1:-3", "1:" + "9" * 20):
        with pytest.raises(ApiError) as e:
            parse_min_seqs(bad)
        assert e.value.code == "invalid_argument"


def test_metrics_of_shards_merge_into_one_family_each_with_a_shard_label():
    a = ("# HELP tsched_x X.\n# TYPE tsched_x gauge\ntsched_x{state=\"p\"} 1.0\n"
         "# HELP tsched_y Y.\n# TYPE tsched_y counter\ntsched_y 2.0\n")
    b = ("# HELP tsched_x X.\n# TYPE tsched_x gauge\ntsched_x{state=\"p\"} 3.0\n"
         "# HELP tsched_y Y.\n# TYPE tsched_y counter\ntsched_y 4.0\n")
    out = router_merge.merge_metrics({0: a, 2: b}).splitlines()
    assert out == ["# HELP tsched_x X.", "# TYPE tsched_x gauge",
                   'tsched_x{shard="0",state="p"} 1.0', 'tsched_x{shard="2",state="p"} 3.0',
                   "# HELP tsched_y Y.", "# TYPE tsched_y counter",
                   'tsched_y{shard="0"} 2.0', 'tsched_y{shard="2"} 4.0']


def test_stats_sum_over_shards_and_keep_each_shard_s_counts():
    one = {"by_state": {"pending": 2, "running": 1}, "by_priority": {"5": 3},
           "by_tenant": {"a": {"pending": 2}}, "oldest_claimable_age_s": 1.5,
           "waiting_claims": 1, "schedules": 2, "applied_seq": 10}
    two = {"by_state": {"pending": 1, "running": 0}, "by_priority": {"5": 1},
           "by_tenant": {"b": {"pending": 1}}, "oldest_claimable_age_s": 4.0,
           "waiting_claims": 2, "schedules": 1, "applied_seq": 7}
    out = router_merge.sum_stats({0: one, 1: two})
    assert out["by_state"] == {"pending": 3, "running": 1}
    assert out["by_priority"] == {"5": 4}
    assert out["by_tenant"] == {"a": {"pending": 2}, "b": {"pending": 1}}
    assert out["oldest_claimable_age_s"] == 4.0 and out["waiting_claims"] == 3
    assert out["schedules"] == 3
    assert out["by_shard"]["1"] == {"pending": 1, "running": 0}
    assert out["applied_seqs"] == {"0": 10, "1": 7}


def test_listing_cursor_round_trips_and_a_foreign_one_is_invalid_argument():
    state = [["123", 2], None, [None, 0]]
    text = router_merge._encode_cursor(state)
    assert router_merge._decode_cursor(text, 3) == state
    for bad in (text[:-3] + "!!!", "123", router_merge._encode_cursor(state[:2]),
                router_merge._encode_cursor([["1", -1], None, None])):
        with pytest.raises(ApiError) as e:
            router_merge._decode_cursor(bad, 3)
        assert e.value.code == "invalid_argument"


def test_the_client_keeps_sequences_per_shard():
    t = SeqTracker()
    t.note({"applied_seq": 4})
    assert t.min_seq() == 4                       # a single group: one number, as before
    t.note({"shard": 2, "applied_seq": 9})
    t.note({"shard": 0, "applied_seq": 30})
    t.note({"shard": 2, "applied_seq": 7})        # older: kept at 9
    t.note({"tasks": [], "applied_seqs": {"1": 5, "0": 12}})
    t.note({}, httpx.Headers({"X-Applied-Seq": "11", "X-Tsched-Shard": "3"}))
    assert t.min_seq() == "0:30,1:5,2:9,3:11"
    assert t.seen == 30


def test_claims_ask_the_shard_that_last_gave_work_first_but_every_fourth_rotates():
    from types import SimpleNamespace

    from tsched.node.shards.claim_fanout import ROTATE_EVERY, _order, _remember_productive
    r = SimpleNamespace(count=4, rotation=0, productive={})
    kind = ("w", ("t",), 30_000, 0, None)
    assert [_order(r, kind)[0] for _ in range(4)] == [0, 1, 2, 3]   # nothing known: in turn
    _remember_productive(r, kind, 2)
    firsts = [_order(r, kind)[0] for _ in range(2 * ROTATE_EVERY)]
    assert firsts.count(2) >= 2 * ROTATE_EVERY - 2             # mostly where the work is
    assert set(firsts) - {2}                                   # yet others come first too
    assert sorted(_order(r, kind)) == [0, 1, 2, 3]             # every shard is asked


def test_open_watches_are_counted_per_work_and_shard_whichever_worker_opened_them():
    from types import SimpleNamespace

    from tsched.node.shards.claim_fanout import _count_watch, _watched
    r = SimpleNamespace(watching={})
    a, b = ("w-a", ("t",), 30_000, 0, None), ("w-b", ("t",), 60_000, 0, None)
    other = ("w-a", ("u",), 30_000, 0, None)
    _count_watch(r, a, 1, 1)
    assert _watched(r, b, 1)                   # another worker of the same task types
    assert not _watched(r, b, 0) and not _watched(r, other, 1)
    _count_watch(r, b, 1, 1)
    _count_watch(r, a, 1, -1)
    assert _watched(r, a, 1)                   # b's watch is still open
    _count_watch(r, b, 1, -1)
    assert not _watched(r, a, 1) and r.watching == {}   # nothing left behind


def _resharded_router(count: int, holder: dict[str, int], resharded: bool = True):
    """A Router without its app: `send` answers GET /v1/tasks/{id} from `holder`."""
    from collections import OrderedDict

    from tsched.node.shards.router import Router
    from tsched.node.shards.upstream import Answer
    r = Router.__new__(Router)
    r.count, r.resharded, r.ids, r.asked, r.paths = count, resharded, OrderedDict(), [], []

    async def send(request, shard, method, path_qs, body, **kw):
        tid = path_qs.rsplit("/", 1)[1]
        r.asked.append(shard)
        r.paths.append(path_qs)
        return Answer(200 if holder.get(tid) == shard else 404, b"{}", "application/json", {})
    r.send = send
    return r


def test_a_resharded_router_asks_the_named_shard_then_the_others_once_per_id():
    import asyncio

    old = "01" + "c" * 30           # names shard 1, lives on shard 2 since the restore
    bare = "f0" + "d" * 30          # names no shard of 3
    r = _resharded_router(3, {old: 2, bare: 0, "02" + "e" * 30: 2})
    assert asyncio.run(r.id_shard(None, old)) == 2
    assert r.asked == [1, 0, 2]                     # its named shard first; at most 3 asks
    assert asyncio.run(r.id_shard(None, old)) == 2 and r.asked == [1, 0, 2]   # cached
    r.asked.clear()
    assert asyncio.run(r.id_shard(None, bare)) == 0 and sorted(r.asked) == [0, 1, 2]
    r.asked.clear()
    assert asyncio.run(r.id_shard(None, "02" + "e" * 30)) == 2 and r.asked == [2]
    r.asked.clear()
    with pytest.raises(ApiError) as e:
        asyncio.run(r.id_shard(None, "a" * 32))
    assert e.value.code == "not_found" and sorted(r.asked) == [0, 1, 2]
    plain = _resharded_router(3, {old: 2}, resharded=False)
    assert asyncio.run(plain.id_shard(None, old)) == 1 and plain.asked == []   # as before


def test_a_resharded_router_finds_a_workflow_by_asking_for_workflows():
    import asyncio

    wid = "01" + "b" * 30           # made on shard 1, lives on shard 0 since the restore
    r = _resharded_router(2, {wid: 0})
    assert asyncio.run(r.id_shard(None, wid, "workflows")) == 0
    assert r.paths == [f"/v1/workflows/{wid}"] * 2


def _router(tmp_path, nodes: int, extra: str):
    from tests.unit.node.shards.test_shards import load
    from tsched.node.shards.router import Router
    from tsched.node.shards.upstream import Upstreams
    cfg = load(tmp_path, nodes=nodes, extra=extra)
    return Router(cfg, "n1", Upstreams(cfg, "n1"))


def test_a_router_lists_shard_0s_members_as_the_nodes_where_every_node_holds_every_shard(
        tmp_path):
    from tsched.node.shards import members_routes as mr
    r = _router(tmp_path, 3, "shards = 2")
    doc = {"members": [{"id": "n1", "raft": "127.0.0.1:9801", "http": "127.0.0.1:9851"},
                       {"id": "n2", "raft": "127.0.0.1:9802", "http": "127.0.0.1:9852"},
                       {"id": "n4", "raft": "127.0.0.1:9900", "http": "127.0.0.1:9704"}]}
    # a node of the file: its API as the file has it; another: as its change recorded it
    assert mr.node_list(r, doc) == [
        {"id": "n1", "raft": "127.0.0.1:9801", "http": "127.0.0.1:9701"},
        {"id": "n2", "raft": "127.0.0.1:9802", "http": "127.0.0.1:9702"},
        {"id": "n4", "raft": "127.0.0.1:9900", "http": "127.0.0.1:9704"}]
    mr._changeable(r)


def test_a_partial_placement_lists_the_file_and_refuses_changes(tmp_path):
    from tsched.node.shards import members_routes as mr
    r = _router(tmp_path, 4, "shards = 2\nreplicas = 3")
    assert [m["id"] for m in mr.node_list(r, {"members": []})] == ["n1", "n2", "n3", "n4"]
    with pytest.raises(ApiError) as e:
        mr._changeable(r)
    assert status_of(e.value) == 409 and e.value.details["reason"] == "partial_placement"
    assert "operations.md" in e.value.message


def _listing_router(machines: list, scan_max: int):
    """A Router without its app whose shards answer GET /v1/tasks from real state machines,
    each page bounded by `scan_max` examined tasks as a shard replica's is."""
    from urllib.parse import parse_qsl, urlsplit

    import orjson

    from tsched.node import present
    from tsched.node.api import validate
    from tsched.node.shards.router import Router
    from tsched.node.shards.upstream import Answer
    r = Router.__new__(Router)
    r.count = len(machines)

    async def send(request, shard, method, path_qs, body, **kw):
        q = dict(parse_qsl(urlsplit(path_qs).query))
        sm = machines[shard]
        tasks, cursor = sm.list_tasks(**validate.task_filters(q), scan_max=scan_max)
        out = {"tasks": [present.task(t) for t in tasks], "next_cursor": cursor,
               "item_cursors": [str(t.seq + 1) for t in tasks], "applied_seq": sm.seq}
        return Answer(200, orjson.dumps(out), "application/json", {})
    r.send = send
    return r


def test_merged_pages_of_bounded_shard_pages_list_every_task_once_newest_first():
    """Shards whose pages stop at their scan bound (with fewer tasks than asked, or none)
    merge into pages that, followed to the end, list every matching task once, newest
    first by creation, while tasks are submitted between the pages (DESIGN 7, 13)."""
    import asyncio

    import orjson
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from tsched.statemachine import StateMachine
    from tsched.statemachine import commands as c
    from tsched.node.shards.router import ROUTER
    machines = [StateMachine() for _ in range(3)]
    t0, n = 1_700_000_000_000, 0

    def submit(shard: int, task_type: str) -> str:
        nonlocal n
        n += 1
        cmd = c.SubmitTask(request_id=f"r{n}", now_ms=t0 + n * 10, task_id=f"{shard:02x}t{n}",
                           tenant="a", task_type=task_type)
        assert machines[shard].apply(cmd).ok
        made.append(cmd.task_id)
        return cmd.task_id
    made: list[str] = []
    for i in range(40):
        submit(i * 7 % 3, "x" if i % 3 else "y")
    r = _listing_router(machines, scan_max=2)
    for query, keep, since in (("task_type=x&limit=3", "x", 0),
                               ("finished_after=0&limit=5", "", 0),
                               ("created_after=1700000000.1&limit=4", "xy", t0 + 100)):
        app = web.Application()
        app[ROUTER] = r
        want = list(made)        # the tasks there when the listing starts
        got, cursor, pages = [], None, 0
        while True:
            qs = query + (f"&cursor={cursor}" if cursor else "")
            req = make_mocked_request("GET", f"/v1/tasks?{qs}", app=app)
            answer = asyncio.run(router_merge.merged_listing(req, "/v1/tasks", "tasks",
                                                             lambda t: (t["created_at"],),
                                                             newest_first=True))
            page = orjson.loads(answer.body)
            got += [t["task_id"] for t in page["tasks"]]
            cursor, pages = page["next_cursor"], pages + 1
            for shard in range(3):       # newer than the listing's first page: not listed
                submit(shard, "x")
            if cursor is None:
                break
            assert pages < 200
        tasks = [machines[int(tid[:2], 16)].tasks[tid] for tid in reversed(want)]
        assert got == [t.task_id for t in tasks
                       if t.task_type in keep and t.created_at_ms >= since], query
