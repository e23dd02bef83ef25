"""A 3-node cluster with 3 shards on real processes (DESIGN.md section 13): any node routes
any request, a worker on one node drains every shard, a node or a single shard process can
die without losing anything, and a data dir made with other values is refused."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tsched.client import Client, Worker
from tsched.node.topology import shard_of_tenant, shifted
from tsched.node.config import internal_http
from tsched.node.shards.claim_fanout import SHARD_WAIT_S

from tests.harness.cluster import TSNODE, Cluster
from tests.harness.cluster import running as running_cluster
from tests.harness.waits import wait_until
from tests.integration.worker_support import DEADLINE_S, running

pytestmark = pytest.mark.slow
SHARDS = 3
# Tenants whose shards cover every shard of a 3-shard cluster.
TENANTS = [f"team-{i}" for i in range(12)]


@pytest.fixture
def sharded(tmp_path):
    yield from running_cluster(tmp_path, shards=SHARDS)


def shard_pids(cluster: Cluster, node_id: str) -> dict[int, int]:
    """{shard: pid} of a node's shard processes, as its supervisor logs each start (they
    are forked from its zygote, so `ps` shows them under the zygote's command line)."""
    started = re.findall(r"event=shard_started shard=(\d+) pid=(\d+)",
                         cluster.log_path(node_id).read_text(errors="replace"))
    return {int(s): int(p) for s, p in started}     # the last start of each shard


def test_tenants_cover_every_shard():
    assert {shard_of_tenant(t, SHARDS) for t in TENANTS} == set(range(SHARDS))


def test_sigkill_of_a_node_leading_shards_loses_nothing_and_every_shard_elects(sharded):
    with Client(sharded.urls, timeout_s=30) as c:
        made = c.submit_many([{"task_type": "t", "tenant": t} for t in TENANTS])
        leaders = sharded.wait_shard_leaders()
        victim = max(sharded.ids, key=lambda n: list(leaders.values()).count(n))
        assert victim in leaders.values()
        sharded.kill(victim)
        after = sharded.wait_shard_leaders(exclude=[victim])
        assert victim not in after.values()
        for t in made:
            assert c.get(t["task_id"])["state"] == "pending"
        more = c.submit_many([{"task_type": "t", "tenant": t} for t in TENANTS])
        assert {t["shard"] if "shard" in t else int(t["task_id"][:2], 16)
                for t in more} == set(range(SHARDS))
    sharded.start_node(victim)
    sharded.wait_shard_leaders()


def test_a_shard_process_killed_alone_is_restarted_and_catches_up(sharded):
    pids = shard_pids(sharded, "n1")
    assert sorted(pids) == list(range(SHARDS))
    tenant = next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == 1)
    os.kill(pids[1], signal.SIGKILL)
    with Client([sharded.url("n2")], timeout_s=30) as c:
        for _ in range(5):
            c.submit("t", tenant=tenant)
    wait_until(lambda: shard_pids(sharded, "n1").get(1) not in (None, pids[1]),
               DEADLINE_S, "shard 1 of n1 started again")

    def caught_up():
        shard = (sharded.shard_status("n2") or [{}] * SHARDS)[1]
        nodes = {n["id"]: n for n in shard.get("nodes") or ()}
        seqs = {n.get("applied_seq") for n in nodes.values()}
        return "n1" in nodes and nodes["n1"]["reachable"] and len(seqs) == 1
    wait_until(caught_up, DEADLINE_S, "n1's shard 1 applied what the others applied")
    assert "event=shard_exited shard=1" in sharded.log("n1")
    assert shard_pids(sharded, "n1").keys() == pids.keys()


def test_sigkill_of_the_supervisor_leaves_no_shard_process(sharded):
    pids = shard_pids(sharded, "n3")
    assert len(pids) == SHARDS
    sharded.procs["n3"].send_signal(signal.SIGKILL)   # the supervisor alone, not its group
    sharded.procs["n3"].wait(10)

    def gone():
        return not any(Path(f"/proc/{p}").exists() and b"tsched" in
                       Path(f"/proc/{p}/cmdline").read_bytes() for p in pids.values())
    wait_until(gone, 15, "shard processes of a dead supervisor to exit")


def test_sigterm_stops_every_shard_process_with_status_0(sharded):
    pids = shard_pids(sharded, "n2")
    assert sharded.stop("n2") == 0
    assert not any(Path(f"/proc/{p}").exists() for p in pids.values())
    log = sharded.log("n2", 100_000)
    assert "ERROR" not in log and "Traceback" not in log
    # the group's SIGTERM reached the shard processes too: none was started again
    assert "event=shard_exited" not in log and log.count("event=shard_started") == SHARDS


def test_a_data_dir_made_with_other_shards_is_refused_and_left_alone(sharded):
    sharded.stop("n1")
    data = sharded.data_dir("n1")
    before = sorted(p.name for p in data.iterdir())
    other = sharded.config_path.with_name("other.toml")
    other.write_text(sharded.config_path.read_text().replace(f"shards = {SHARDS}",
                                                             "shards = 2"))
    run = subprocess.run([TSNODE, "--config", str(other), "--id", "n1"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    assert f"shards = {SHARDS} (the config says shards = 2)" in run.stderr
    assert sorted(p.name for p in data.iterdir()) == before


def test_a_worker_claiming_again_and_again_keeps_one_waiter_per_shard(sharded):
    """Each claim waits on every shard; tasks come on one. The polls left open on the other
    shards are adopted by the next claim, so their waiters do not pile up (a shard allows
    16 per worker) and nothing is leased to a claim that is gone."""
    tenant = next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == 0)
    claim = {"worker_id": "w-many", "task_types": ["again"], "max_tasks": 1, "wait_s": 10}
    got = []
    for _ in range(20):
        result: dict = {}
        waiting = threading.Thread(target=lambda result=result: result.update(
            answer=sharded.call("n1", "POST", "/v1/claims", claim, timeout_s=30)))
        waiting.start()

        def shard0_waits():   # the waiter is at shard 0's leader: ask every node's replica
            answers = [sharded.call(n, "GET", f"/v1/stats?tenant={tenant}")
                       for n in sharded.ids]
            return any(st == 200 and body["waiting_claims"] >= 1 for st, body in answers)
        wait_until(shard0_waits, 10, "the claim waiting at shard 0")
        status, _ = sharded.call("n2", "POST", "/v1/tasks", {"task_type": "again",
                                                             "tenant": tenant})
        assert status == 201
        waiting.join(30)
        status, body = result["answer"]
        assert status == 200, body
        got += body["tasks"]
    assert len(got) == 20 and {t["shard"] for t in got} == {0}
    for shard in (1, 2):   # the other shards hold this worker's one open poll, at most
        other = next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == shard)
        waiting = [sharded.call(n, "GET", f"/v1/stats?tenant={other}")[1]["waiting_claims"]
                   for n in sharded.ids]
        assert sum(waiting) <= 1, (shard, waiting)
    for t in got:
        status, _ = sharded.call("n3", "POST", f"/v1/tasks/{t['task_id']}/complete",
                                 {"fencing_token": t["fencing_token"], "result": None})
        assert status == 200


def _claim_requests(c) -> list[float]:
    """POST /v1/claims requests each shard's replicas have served (all routers' /metrics),
    by shard. Each node's /metrics is read once, all at the same time: read one after the
    other, once per shard, they could outlast a watch on a loaded machine."""
    lines = ['tsched_http_request_duration_seconds_count{shard="%d",method="POST",'
             'route="/v1/claims"} ' % s for s in range(SHARDS)]
    with ThreadPoolExecutor(len(c.ids)) as pool:
        texts = list(pool.map(lambda n: httpx.get(c.url(n) + "/metrics", timeout=10).text,
                              c.ids))
    return [sum(float(x[len(line):]) for text in texts for x in text.splitlines()
                if x.startswith(line)) for line in lines]


WATCH_S = SHARD_WAIT_S - 0.5


def test_a_claim_skips_shards_another_worker_watches_yet_gets_work_that_lands_there(sharded):
    """While a worker's claim watches every shard, another worker's claim of the same task
    types does not ask the watched shards (their watches would have answered had they
    work); work that lands on one of them is still claimed."""
    by_shard = {s: next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == s)
                for s in range(SHARDS)}
    claim = {"task_types": ["skip"], "max_tasks": 10}

    def watched_everywhere():     # w-a's watches wait at every shard's leader
        # asked at once: nine calls one after the other could outlast the watch on a
        # loaded machine
        with ThreadPoolExecutor(len(sharded.ids) * SHARDS) as pool:
            stats = list(pool.map(lambda sn: sharded.call(
                sn[1], "GET", f"/v1/stats?tenant={by_shard[sn[0]]}")[1],
                [(s, n) for s in range(SHARDS) for n in sharded.ids]))
        return all(sum(st["waiting_claims"] for st in stats[s * 3:s * 3 + 3]) >= 1
                   for s in range(SHARDS))

    # w-a's watches must stay open until w-b's claim was counted: its wait fits in one of
    # the router's rounds of watching (claim_fanout.SHARD_WAIT_S), between which no shard
    # is watched.
    for _ in range(3):
        result: dict = {}
        waiting = threading.Thread(target=lambda result=result: result.update(answer=sharded.call(
            "n1", "POST", "/v1/claims", {**claim, "worker_id": "w-a", "wait_s": WATCH_S},
            timeout_s=30)))
        waiting.start()
        wait_until(watched_everywhere, 10, "w-a watching every shard")
        before = _claim_requests(sharded)
        status, body = sharded.call("n1", "POST", "/v1/claims",
                                    {**claim, "worker_id": "w-b", "wait_s": 0})
        assert status == 200 and body["tasks"] == []
        after = _claim_requests(sharded)
        if waiting.is_alive():
            break
        waiting.join(30)      # its wait ran out first (a slow machine): again
    else:
        pytest.fail("w-a's claim ended before w-b's was counted, three times")
    assert after == before    # w-b asked no shard: every one was watched
    status, _ = sharded.call("n2", "POST", "/v1/tasks", {"task_type": "skip",
                                                         "tenant": by_shard[2]})
    assert status == 201
    waiting.join(30)
    status, body = result["answer"]
    assert status == 200, body
    got = body["tasks"]
    if not got:               # w-a's wait ran out before the task came: claim it anew
        status, body = sharded.call("n1", "POST", "/v1/claims",
                                    {**claim, "worker_id": "w-a", "wait_s": 20},
                                    timeout_s=30)
        assert status == 200, body
        got = body["tasks"]
    assert [t["shard"] for t in got] == [2]


def test_a_damaged_shard_replica_stops_its_node_and_rejoin_empty_restores_every_shard(sharded):
    """A shard replica that stops on damaged storage is not restarted in a loop: the whole
    node stops loudly, and `--rejoin-empty` on the node empties each local replica, which
    catch up from their leaders."""
    from .test_storage_faults import STOP_WAIT_S, flip_every_copy
    tenant = next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == 2)
    with Client([sharded.url("n1")], timeout_s=30) as c:
        made = [c.submit("t", tenant=tenant, payload={"mark": f"dmg-{i:03d}"}) for i in range(20)]
    wait_until(lambda: all(sharded.call("n3", "GET", f"/v1/tasks/{t['task_id']}")[0] == 200
                         for t in made), DEADLINE_S, "n3 holds every task")
    assert sharded.stop("n3") == 0
    data_mdb = sharded.data_dir("n3") / "shard-2" / "raft-log" / "data.mdb"
    assert flip_every_copy(data_mdb, b"dmg-010") >= 1
    sharded.start_node("n3")
    code = sharded.procs["n3"].wait(timeout=STOP_WAIT_S)
    log = sharded.log("n3", 100_000)
    assert code == 76, log
    assert "storage corrupt" in log and "event=shard_storage_failed shard=2" in log, log
    sharded.start_node("n3", "--rejoin-empty")

    def serves_every_task() -> bool:
        try:
            return all(sharded.call("n3", "GET", f"/v1/tasks/{t['task_id']}")[0] == 200
                       for t in made)
        except httpx.HTTPError:        # not listening yet
            return False
    wait_until(serves_every_task, DEADLINE_S, "the rejoined node serves every task")


# --- on one cluster for the rest of the module: tests that kill, stop, damage, or count
# every claim request and waiter are above, each on a cluster of its own; these use task
# types of their own and count by difference, the cron test deletes its schedule, the
# next-to-last only moves leaders and the last only pauses a shard replica and waits for
# it to be back.

@pytest.fixture(scope="module")
def shared_sharded(tmp_path_factory):
    yield from running_cluster(tmp_path_factory.mktemp("sharded"), shards=SHARDS)


def test_a_worker_on_one_node_drains_tenants_of_every_shard(shared_sharded):
    sharded = shared_sharded

    def completed() -> tuple[int, int]:
        # at each shard's leader: n2's replicas may not have applied the worker's reports
        status, stats = sharded.call("n2", "GET", "/v1/stats?consistency=linearizable")
        assert status == 200, stats
        return (stats["by_state"]["completed"],
                sum(s["completed"] for s in stats["by_shard"].values()))
    before = completed()
    with Client([sharded.url("n2")], timeout_s=30) as producer:
        made = producer.submit_many([{"task_type": "square", "tenant": t, "payload": i}
                                     for i, t in enumerate(TENANTS * 3)])
    assert all(t["state"] == "pending" for t in made)
    assert {int(t["task_id"][:2], 16) for t in made} == set(range(SHARDS))
    for t in made:
        assert int(t["task_id"][:2], 16) == shard_of_tenant(t["tenant"], SHARDS)
    worker = Worker([sharded.url("n1")], handlers={"square": lambda p, ctx: p * p},
                    concurrency=4)
    with Client([sharded.url("n3")], timeout_s=30) as reader, running(worker):
        def all_done():
            return all(reader.get(t["task_id"])["state"] == "completed" for t in made)
        wait_until(all_done, DEADLINE_S, "every task completed")
        results = {t["task_id"]: reader.get(t["task_id"])["result"] for t in made}
    assert results == {t["task_id"]: t["payload"] ** 2 for t in made}
    after = completed()
    assert [a - b for a, b in zip(after, before)] == [len(made), len(made)]


def test_listing_merges_shards_newest_first_across_pages(shared_sharded):
    sharded = shared_sharded
    with Client([sharded.url("n1")], timeout_s=30) as c:
        # a task type of its own: the module's cluster is shared
        ids = [c.submit("listing", tenant=TENANTS[i % len(TENANTS)])["task_id"]
               for i in range(10)]
    def listed() -> bool:
        """n3's replicas answer without the writer's min_seq: eventually all ten, in order."""
        tasks = sharded.pages("n3", "/v1/tasks", "tasks", "task_type=listing&limit=3")
        return [t["task_id"] for t in tasks] == list(reversed(ids))
    wait_until(listed, 30, "n3's merged pages to list the ten tasks newest first")


def test_a_creation_window_pages_through_the_shards_while_tasks_arrive(shared_sharded):
    """GET /v1/tasks with created_after through a router (DESIGN 7, 13): the merged pages,
    followed to the end while more tasks are submitted between them, list the window's
    tasks once each, newest first; a bad time is a 400 naming its field."""
    sharded = shared_sharded
    one_per_shard = list({shard_of_tenant(t, SHARDS): t for t in TENANTS}.values())
    assert len(one_per_shard) == SHARDS
    with Client([sharded.url("n1")], timeout_s=30) as c:
        made = [c.submit("windowed", tenant=TENANTS[i % len(TENANTS)]) for i in range(9)]
        ids = [t["task_id"] for t in made]
        query = f"task_type=windowed&created_after={made[3]['created_at']}&limit=2"

        def listed() -> bool:
            tasks = sharded.pages("n2", "/v1/tasks", "tasks", query)
            return [t["task_id"] for t in tasks] == ids[:2:-1]
        wait_until(listed, 30, "n2's merged pages to list the window's six tasks")
        got, cursor = [], None
        while True:
            status, page = sharded.call(
                "n2", "GET", f"/v1/tasks?{query}" + (f"&cursor={cursor}" if cursor else ""))
            assert status == 200, page
            got += [t["task_id"] for t in page["tasks"]]
            for tenant in one_per_shard:   # newer than the first page: not listed
                c.submit("windowed", tenant=tenant)
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert got == ids[:2:-1]
    status, body = sharded.call("n3", "GET", "/v1/tasks?created_after=soon")
    assert status == 400 and body["error"]["details"]["field"] == "created_after"


def test_cron_occurrences_name_their_shard_and_route_from_any_node(shared_sharded):
    sharded = shared_sharded
    tenant = next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == 2)
    status, _ = sharded.call("n1", "PUT", "/v1/schedules/every-second", {
        "tenant": tenant, "cron": "* * * * * *", "task": {"task_type": "tick"}})
    assert status in (200, 201)

    def occurrence():
        status, page = sharded.call("n2", "GET", "/v1/tasks?schedule_id=every-second")
        return page if status == 200 and page["tasks"] else None
    try:
        page = wait_until(occurrence, 30, "a cron occurrence")
    finally:    # the cluster is shared: no occurrence fires into the tests after this one
        assert sharded.call(
            "n1", "DELETE", f"/v1/schedules/every-second?tenant={tenant}")[0] == 200
    task = page["tasks"][0]
    assert task["task_id"].startswith("s02-") and len(task["task_id"]) == 36
    # seen at n2; the other nodes' replicas may lag: with the listing's min_seq
    seen = ",".join(f"{s}:{n}" for s, n in page["applied_seqs"].items())
    for node in sharded.ids:
        status, got = sharded.call(node, "GET", f"/v1/tasks/{task['task_id']}?min_seq={seen}")
        assert status == 200 and got["shard"] == 2, got
    status, err = sharded.call("n3", "GET", "/v1/tasks/s3f-" + "0" * 32)
    assert status == 404 and err["error"]["code"] == "not_found"


def test_a_claim_waiting_on_every_shard_leases_only_what_it_delivers(shared_sharded):
    """A claim that waits watches every shard and claims at the one with work: the shards
    it watched lease nothing for it, then or later (a task leased for a claim that took
    work elsewhere would have to be released, and would carry a `released` attempt)."""
    sharded = shared_sharded
    by_shard = {s: next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == s)
                for s in range(SHARDS)}
    claim = {"worker_id": "w-watch", "task_types": ["watched"], "max_tasks": 1, "wait_s": 20}
    result: dict = {}
    waiting = threading.Thread(target=lambda: result.update(
        answer=sharded.call("n1", "POST", "/v1/claims", claim, timeout_s=40)))
    waiting.start()

    def every_shard_waits():
        counts = {s: sum(sharded.call(n, "GET", f"/v1/stats?tenant={t}")[1]["waiting_claims"]
                         for n in sharded.ids) for s, t in by_shard.items()}
        return all(n >= 1 for n in counts.values())
    wait_until(every_shard_waits, 15, "the claim watching every shard")
    status, first = sharded.call("n2", "POST", "/v1/tasks", {"task_type": "watched",
                                                            "tenant": by_shard[0]})
    assert status == 201
    waiting.join(40)
    status, body = result["answer"]
    assert status == 200 and [t["task_id"] for t in body["tasks"]] == [first["task_id"]]
    # The watches of shards 1 and 2 are still open: work arriving there is not leased to
    # this worker's gone claim; the next claim gets it on its first attempt.
    status, second = sharded.call("n3", "POST", "/v1/tasks", {"task_type": "watched",
                                                             "tenant": by_shard[1]})
    assert status == 201
    status, body = sharded.call("n1", "POST", "/v1/claims", claim, timeout_s=40)
    assert status == 200 and [t["task_id"] for t in body["tasks"]] == [second["task_id"]]
    assert [a["outcome"] for a in body["tasks"][0]["attempts"]] == [None]
    # claimed at the shards' leaders (the second submitted through n3): n2's replicas may
    # lag, so read at the leaders
    for t in (first, body["tasks"][0]):
        status, task = sharded.call("n2", "GET",
                                    f"/v1/tasks/{t['task_id']}?consistency=linearizable")
        assert status == 200 and all(a["outcome"] != "released" for a in task["attempts"])


def test_task_ids_route_from_any_node_and_an_unknown_shard_is_not_found(shared_sharded):
    sharded = shared_sharded
    status, task = sharded.call("n1", "POST", "/v1/tasks", {"task_type": "t", "tenant": "x"})
    assert status == 201 and task["shard"] == shard_of_tenant("x", SHARDS)
    for node in sharded.ids:
        status, got = sharded.call(node, "GET", f"/v1/tasks/{task['task_id']}"
                                   f"?min_seq={task['shard']}:{task['applied_seq']}")
        assert status == 200 and got["task_id"] == task["task_id"], got
    status, err = sharded.call("n2", "GET", "/v1/tasks/3f" + "0" * 30)
    assert status == 404 and err["error"]["code"] == "not_found"
    status, cluster = sharded.call("n3", "GET", "/v1/cluster")
    assert [s["shard"] for s in cluster["shards"]] == list(range(SHARDS))
    assert cluster["leader"] == cluster["shards"][0]["leader"]
    assert [t["name"] for t in cluster["tiers"]] == ["critical", "high", "normal", "low", "batch"]


def test_a_workflow_lives_in_its_tenants_shard_and_routes_from_any_node(shared_sharded):
    sharded = shared_sharded
    steps = [{"name": "a", "task_type": "wf_sharded"},
             {"name": "b", "task_type": "wf_sharded", "deps": ["a"]}]
    by_tenant = {}
    for tenant in TENANTS[:2]:
        status, wf = sharded.call("n1", "POST", "/v1/workflows",
                                  {"tenant": tenant, "steps": steps})
        assert status == 201 and wf["shard"] == shard_of_tenant(tenant, SHARDS), wf
        assert int(wf["workflow_id"][:2], 16) == wf["shard"]
        by_tenant[tenant] = wf
    for node in sharded.ids:
        for wf in by_tenant.values():
            q = f"?min_seq={wf['shard']}:{wf['applied_seq']}"
            status, got = sharded.call(node, "GET", f"/v1/workflows/{wf['workflow_id']}{q}")
            assert status == 200 and got["steps"][1]["state"] == "waiting", got
            tid = wf["steps"][1]["task_id"]
            status, seen = sharded.call(node, "GET", f"/v1/tasks/{tid}/parents{q}")
            assert status == 200 and seen["parents"]["a"]["state"] == "pending", seen
    wf = by_tenant[TENANTS[0]]
    status, out = sharded.call("n2", "POST", f"/v1/workflows/{wf['workflow_id']}/cancel")
    assert status == 200 and out["state"] == "cancelled", out
    listed = sharded.pages("n3", "/v1/workflows", "workflows", "limit=1")
    assert {w["workflow_id"] for w in by_tenant.values()} <= {w["workflow_id"] for w in listed}


def test_lateness_by_tier_carries_the_shard_of_each_claim(shared_sharded):
    sharded = shared_sharded
    tenant = next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == 1)
    status, b = sharded.call("n2", "POST", "/v1/tasks", {"task_type": "tier-shard",
                                                          "tenant": tenant, "priority": 0})
    assert status == 201, b
    status, b = sharded.call("n2", "POST", "/v1/claims", {
        "worker_id": "w", "task_types": ["tier-shard"], "max_tasks": 1, "wait_s": 5})
    assert status == 200 and len(b["tasks"]) == 1, b
    line = 'tsched_scheduling_lateness_seconds_count{shard="1",tier="critical"} '

    def counted():   # any node serving shard 1 reports it, labelled with its shard
        for n in sharded.ids:
            text = httpx.get(sharded.url(n) + "/metrics", timeout=10).text
            if any(x.startswith(line) and float(x[len(line):]) >= 1
                   for x in text.splitlines()):
                return True
        return False
    wait_until(counted, timeout_s=20, what="a shard-1 critical claim in /metrics")


def test_answers_of_a_sharded_cluster_match_the_openapi_document(shared_sharded):
    sharded = shared_sharded
    from .test_dashboard import conforms
    status, doc = sharded.call("n1", "GET", "/v1/openapi.json")
    assert status == 200
    paths = doc["paths"]

    def check(path_key: str, method: str, value, code: str = "200") -> None:
        schema = paths[path_key][method]["responses"][code]["content"]["application/json"]
        assert conforms(schema["schema"], value, doc) == [], (path_key, value)

    status, batch = sharded.call("n2", "POST", "/v1/tasks",
                                 {"tasks": [{"task_type": "t", "tenant": t} for t in TENANTS]})
    check("/v1/tasks", "post", batch, "201")
    status, one = sharded.call("n2", "GET", f"/v1/tasks/{batch['tasks'][0]['task_id']}")
    check("/v1/tasks/{task_id}", "get", one)
    check("/v1/tasks", "get", sharded.call("n3", "GET", "/v1/tasks?limit=5")[1])
    status, claimed = sharded.call("n1", "POST", "/v1/claims",
                                   {"worker_id": "w", "task_types": ["t"], "max_tasks": 4})
    check("/v1/claims", "post", claimed)
    done = [{"task_id": t["task_id"], "fencing_token": t["fencing_token"], "result": 1}
            for t in claimed["tasks"]]
    check("/v1/completions", "post",
          sharded.call("n3", "POST", "/v1/completions", {"completions": done})[1])
    check("/v1/stats", "get", sharded.call("n1", "GET", "/v1/stats")[1])
    check("/v1/cluster", "get", sharded.call("n1", "GET", "/v1/cluster")[1])
    check("/v1/tenants", "get", sharded.call("n1", "GET", "/v1/tenants")[1])


def test_a_claim_carries_completions_of_tasks_on_every_shard(shared_sharded):
    sharded = shared_sharded
    """Completions carried on a claim go to their tasks' shards (not to every shard the
    claim asks), are answered in their order, and the claim still gathers new work."""
    with Client([sharded.url("n1")], timeout_s=30) as c:
        first = c.submit_many([{"task_type": "carry", "tenant": t} for t in TENANTS])
        status, got = sharded.call("n2", "POST", "/v1/claims", {
            "worker_id": "w1", "task_types": ["carry"], "max_tasks": len(first)})
        assert status == 200 and len(got["tasks"]) == len(first), got
        later = c.submit_many([{"task_type": "carry", "tenant": t} for t in TENANTS[:3]])
    done = [{"task_id": t["task_id"], "fencing_token": t["fencing_token"], "result": i}
            for i, t in enumerate(got["tasks"])]
    missing = f"{SHARDS:02x}" + "0" * 30          # a shard this cluster does not have
    status, answer = sharded.call("n3", "POST", "/v1/claims", {
        "worker_id": "w1", "task_types": ["carry"], "max_tasks": 10,
        "completions": done + [{"task_id": missing, "fencing_token": 1, "result": 0}]})
    assert status == 200, answer
    results = answer["completions"]
    assert [r.get("task_id") for r in results[:-1]] == [d["task_id"] for d in done]
    assert all(r["state"] == "completed" for r in results[:-1])
    assert results[-1]["error"]["code"] == "not_found"
    assert sorted(t["task_id"] for t in answer["tasks"]) == sorted(t["task_id"] for t in later)
    for d in done:      # applied by n3's replicas; n1's may lag: read at the leaders
        status, task = sharded.call("n1", "GET",
                                    f"/v1/tasks/{d['task_id']}?consistency=linearizable")
        assert status == 200 and task["state"] == "completed" and task["result"] == d["result"]


def test_minimal_answers_pass_through_the_router_split_by_shard(shared_sharded):
    sharded = shared_sharded
    """`Prefer: return=minimal` reaches every shard a batch of completions (or a claim
    carrying them) is split over: each applied one is answered by id and state, in order;
    and every shard a claim takes tasks from renders them as a worker needs them."""
    with Client([sharded.url("n1")], timeout_s=30) as c:
        made = c.submit_many([{"task_type": "brief", "tenant": t} for t in TENANTS])
    status, got = sharded.call("n2", "POST", "/v1/claims", {
        "worker_id": "w1", "task_types": ["brief"], "max_tasks": len(made)})
    assert status == 200 and len(got["tasks"]) == len(made), got
    done = [{"task_id": t["task_id"], "fencing_token": t["fencing_token"]} for t in got["tasks"]]
    batch, carried = done[::2], done[1::2]
    assert len({d["task_id"][:2] for d in batch}) > 1       # split over several shards
    prefer = {"Prefer": "return=minimal"}
    r = httpx.post(sharded.url("n3") + "/v1/completions", json={"completions": batch},
                   headers=prefer, timeout=30)
    assert r.status_code == 200 and r.headers.get("Preference-Applied") == "return=minimal"
    assert r.json()["results"] == [{"task_id": d["task_id"], "state": "completed"}
                                   for d in batch]
    r = httpx.post(sharded.url("n1") + "/v1/claims", headers=prefer, timeout=30, json={
        "worker_id": "w1", "task_types": ["brief"], "completions": carried})
    assert r.status_code == 200 and r.headers.get("Preference-Applied") == "return=minimal"
    assert r.json()["completions"] == [{"task_id": d["task_id"], "state": "completed"}
                                       for d in carried]
    with Client([sharded.url("n1")], timeout_s=30) as c:
        more = c.submit_many([{"task_type": "brief2", "tenant": t} for t in TENANTS])
    r = httpx.post(sharded.url("n2") + "/v1/claims", headers=prefer, timeout=30, json={
        "worker_id": "w2", "task_types": ["brief2"], "max_tasks": len(more)})
    assert r.status_code == 200 and r.headers.get("Preference-Applied") == "return=minimal"
    claimed = r.json()["tasks"]
    assert claimed and {t["task_id"] for t in claimed} <= {t["task_id"] for t in more}
    for t in claimed:       # what a worker needs, and the shard the router took it from
        assert "attempts" not in t and t["worker_id"] == "w2" and t["state"] == "running"
        assert t["shard"] == int(t["task_id"][:2], 16)


def test_members_are_the_nodes_and_bad_changes_are_refused(shared_sharded):
    """A router lists the nodes at their own addresses, `?shard=s` a group at its shard's
    ports; a change is made in every group (test_membership_shards.py), never through one
    shard's replica alone, and a bad one changes nothing (DESIGN 6.2)."""
    sharded = shared_sharded
    sharded.wait_shard_leaders()    # an earlier test of this cluster stopped a shard replica
    from .test_dashboard import conforms
    _, doc = sharded.call("n1", "GET", "/v1/openapi.json")
    for node in sharded.ids:
        status, body = sharded.call(node, "GET", "/v1/cluster/members")
        assert status == 200, body
        assert body["members"] == [{"id": n, "raft": sharded.raft[n], "http": sharded.http[n]}
                                   for n in sharded.ids]
        assert body["leader"] in sharded.ids and body["changing"] is False
    schema = doc["paths"]["/v1/cluster/members"]["get"]["responses"]["200"]["content"]
    assert conforms(schema["application/json"]["schema"], body, doc) == []
    status, body = sharded.call("n2", "GET", "/v1/cluster/members?shard=2")
    host, port = sharded.raft["n1"].rsplit(":", 1)
    assert status == 200 and body["shard"] == 2, body
    assert {m["id"]: m["raft"] for m in body["members"]}["n1"] == f"{host}:{int(port) + 200}"
    status, err = sharded.call("n2", "GET", f"/v1/cluster/members?shard={SHARDS}")
    assert status == 400 and err["error"]["details"]["field"] == "shard", err
    # shard 1's replica on n1 (its internal API) alone: refused
    with httpx.Client(timeout=10) as client:
        r = client.post(f"http://{internal_http(shifted(sharded.raft['n1'], 1))}"
                        "/v1/cluster/members",
                        json={"id": "n4", "raft": "127.0.0.1:1", "http": "127.0.0.1:2"})
    assert r.status_code == 409 and r.json()["error"]["details"]["reason"] == "sharded", r.text
    status, err = sharded.call("n2", "POST", "/v1/cluster/members",
                               {"id": "n4", "raft": "127.0.0.1:65500", "http": "127.0.0.1:2"})
    assert status == 400 and err["error"]["details"]["field"] == "raft", err   # no shard ports
    status, err = sharded.call("n2", "POST", "/v1/cluster/members",
                               {"id": "n9", "raft": sharded.raft["n1"], "http": "127.0.0.1:2"})
    assert status == 409 and err["error"]["details"]["reason"] == "member_exists", err
    assert err["error"]["details"]["shards_changed"] == [], err
    status, err = sharded.call("n3", "DELETE", "/v1/cluster/members/n9")
    assert status == 404, err
    status, body = sharded.call("n3", "GET", "/v1/cluster/members")
    assert [m["id"] for m in body["members"]] == sharded.ids


def test_leaders_gathered_on_one_node_spread_out_again(shared_sharded):
    sharded = shared_sharded
    moves_before = sharded.log("n1", 1_000_000).count("event=leader_spread")
    # n1 leads two shards, one more than its share (ceil(3/3) = 1); shard 2 leads elsewhere,
    # so that a single move (two checks of the spread) is enough.
    for shard, to in ((0, "n1"), (1, "n1"), (2, "n2")):
        status, body = sharded.call("n3", "POST", "/v1/cluster/transfer-leadership",
                                    {"shard": shard, "to": to})
        assert status in (200, 202), body
    wait_until(lambda: sorted(sharded.wait_shard_leaders().values()) == ["n1", "n2", "n3"],
               90, "one shard leader per node")
    assert sharded.log("n1", 1_000_000).count("event=leader_spread") > moves_before


def test_readiness_needs_every_local_shard(shared_sharded):
    sharded = shared_sharded
    assert sharded.call("n1", "GET", "/readyz")[0] == 200
    pids = shard_pids(sharded, "n1")
    os.kill(pids[2], signal.SIGSTOP)      # one shard replica stops answering
    try:
        status, body = sharded.call("n1", "GET", "/readyz", timeout_s=60)
        assert status >= 500, body
        # yet the node lives: its router answers liveness itself (no restart for this)
        status, body = sharded.call("n1", "GET", "/livez", timeout_s=10)
        assert status == 200 and body == {"status": "alive", "node": "n1"}, body
    finally:
        os.kill(pids[2], signal.SIGCONT)
    wait_until(lambda: sharded.call("n1", "GET", "/readyz")[0] == 200, DEADLINE_S, "n1 ready again")


def test_limits_on_a_sharded_cluster_are_by_tenant_only_and_exact(shared_sharded):
    """docs/DESIGN.md, keyed limits: only a limit partitioned by tenant can be exact over
    shards (a tenant lives in one); any other is refused, never approximated."""
    sharded = shared_sharded
    for body in ({"rate": 5}, {"concurrency": 1, "partition_by": "account_id"}):
        status, err = sharded.call("n1", "PUT", "/v1/limits/global", body)
        assert status == 409 and err["error"]["code"] == "conflict", err
        assert "partitioned by tenant" in err["error"]["message"]
    status, out = sharded.call("n2", "PUT", "/v1/limits/per-team",
                               {"concurrency": 1, "partition_by": "tenant"})
    assert status == 200 and out["partition_by"] == "tenant", out
    teams = [next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == s) for s in range(SHARDS)]
    with Client([sharded.url("n3")], timeout_s=30) as c:
        c.submit_many([{"task_type": "limited", "tenant": t, "limits": ["per-team"]}
                       for t in teams * 2])
    claimed: list[dict] = []

    def one_per_team() -> bool:
        status, got = sharded.call("n1", "POST", "/v1/claims", {
            "worker_id": "w", "task_types": ["limited"], "max_tasks": 10, "wait_s": 0})
        assert status == 200, got
        claimed.extend(got["tasks"])
        return len(claimed) >= SHARDS
    wait_until(one_per_team, 30, "a task of each team claimed")
    status, got = sharded.call("n1", "POST", "/v1/claims", {
        "worker_id": "w", "task_types": ["limited"], "max_tasks": 10, "wait_s": 0.5})
    claimed.extend(got["tasks"])
    assert sorted(t["tenant"] for t in claimed) == sorted(teams)   # one each: exact
    # the claims were made at the shards' leaders; n2's replicas may lag: read there
    status, usage = sharded.call("n2", "GET", "/v1/limits/per-team?consistency=linearizable")
    assert status == 200 and usage["in_use"] == SHARDS, usage
    from .test_dashboard import conforms   # the router's merged answer is a Limit too
    status, doc = sharded.call("n1", "GET", "/v1/openapi.json")
    ok = doc["paths"]["/v1/limits/{name}"]["get"]["responses"]["200"]["content"]
    assert conforms(ok["application/json"]["schema"], usage, doc) == [], usage
    status, gone = sharded.call("n3", "DELETE", "/v1/limits/per-team")
    assert status == 200, gone

    def deleted() -> bool:      # n1's replicas apply the delete a moment later
        status, listed = sharded.call("n1", "GET", "/v1/limits")
        assert status == 200, listed
        return "per-team" not in [x["name"] for x in listed["limits"]]
    wait_until(deleted, 30, "the deleted limit gone from every shard's list")


def test_a_pause_holds_on_every_shard_until_resumed(shared_sharded):
    """Paused queues (issue 48): a pause by task type, sent to one node, holds that type's
    tasks on every shard; a task shows it; resuming lets them all be claimed."""
    from .test_dashboard import conforms   # the router's merged answers keep the schema
    sharded = shared_sharded
    status, doc = sharded.call("n1", "GET", "/v1/openapi.json")

    def check(path: str, value) -> None:
        schema = doc["paths"][path]["post" if path != "/v1/queues" else "get"]["responses"][
            "200"]["content"]["application/json"]["schema"]
        assert conforms(schema, value, doc) == [], (path, value)
    teams = [next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == s) for s in range(SHARDS)]
    status, out = sharded.call("n2", "POST", "/v1/queues/pause", {"task_type": "held"})
    assert status == 200 and out["changed"] is True, out
    check("/v1/queues/pause", out)
    # made through n2's replicas; n3's may lag: with the pause's min_seq on every shard
    seqs = ",".join(f"{s}:{n}" for s, n in out["applied_seqs"].items())
    status, listed = sharded.call("n3", "GET", f"/v1/queues?min_seq={seqs}")
    assert status == 200 and [p["task_type"] for p in listed["pauses"]] == ["held"], listed
    assert "missing_shards" not in listed["pauses"][0]
    check("/v1/queues", listed)
    with Client([sharded.url("n3")], timeout_s=30) as c:
        made = c.submit_many([{"task_type": "held", "tenant": t} for t in teams])
        assert c.get(made[1]["task_id"])["paused"]["task_type"] == "held"
    status, got = sharded.call("n1", "POST", "/v1/claims", {
        "worker_id": "w", "task_types": ["held"], "max_tasks": 10, "wait_s": 0.5})
    assert status == 200 and got["tasks"] == [], got
    status, out = sharded.call("n1", "POST", "/v1/queues/resume", {"task_type": "held"})
    assert status == 200 and out["resumed_at"], out
    check("/v1/queues/resume", out)
    claimed: list[dict] = []

    def all_claimed() -> bool:
        status, got = sharded.call("n1", "POST", "/v1/claims", {
            "worker_id": "w", "task_types": ["held"], "max_tasks": 10, "wait_s": 0})
        claimed.extend(got["tasks"])
        return len(claimed) >= len(made)
    wait_until(all_claimed, 30, "every held task claimed after the resume")
    assert sorted(t["task_id"] for t in claimed) == sorted(t["task_id"] for t in made)
    wait_until(lambda: sharded.call("n2", "GET", "/v1/queues")[1]["pauses"] == [], 30,
               "the resume applied on n2's replicas")


def test_a_worker_session_spans_every_shard_and_gives_back_each_shards_tasks(shared_sharded):
    """docs/DESIGN.md, worker sessions: a keepalive at any node opens the worker's session
    on every shard; when it stops, each shard's leader gives back that shard's tasks, long
    before their 600 s leases."""
    sharded = shared_sharded
    teams = [next(t for t in TENANTS if shard_of_tenant(t, SHARDS) == s) for s in range(SHARDS)]
    status, opened = sharded.call("n2", "PUT", "/v1/sessions/sess-w", {"timeout_s": 1})
    assert status == 200 and opened["created"] is True, opened
    assert sorted(opened["applied_seqs"]) == [str(s) for s in range(SHARDS)]
    status, listed = sharded.call("n3", "GET", "/v1/sessions?consistency=linearizable")
    mine = [s for s in listed["sessions"] if s["worker_id"] == "sess-w"]
    assert sorted(s["shard"] for s in mine) == list(range(SHARDS)), listed
    assert all(s["silent_s"] is not None for s in mine)   # each shard's leader answered
    with Client([sharded.url("n3")], timeout_s=30) as c:
        made = c.submit_many([{"task_type": "sessioned", "tenant": t} for t in teams])
        claimed: list[dict] = []

        def all_claimed() -> bool:
            status, got = sharded.call("n1", "POST", "/v1/claims", {
                "worker_id": "sess-w", "task_types": ["sessioned"], "max_tasks": 10,
                "wait_s": 0, "lease_s": 600})
            assert status == 200, got
            claimed.extend(got["tasks"])
            return len(claimed) >= SHARDS
        wait_until(all_claimed, 30, "a task of each shard claimed")
        # no keepalive any more: every shard's leader hears nothing for 1 s
        def leaders_view(task_id: str) -> dict:   # a follower may not have the claim yet
            return c.get(task_id, consistency="linearizable")
        wait_until(lambda: all(leaders_view(t["task_id"])["state"] == "pending" for t in made),
                   30, "every shard's task given back, long before its lease")
        errors = {leaders_view(t["task_id"])["attempts"][-1]["error"] for t in made}
    assert errors == {"worker session expired"}
    status, err = sharded.call("n1", "DELETE", "/v1/sessions/sess-w")
    assert status == 404 and err["error"]["code"] == "not_found", err
