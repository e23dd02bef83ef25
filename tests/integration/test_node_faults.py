"""Crashes of real tsnode processes: no acknowledged task is lost, service comes back."""
from __future__ import annotations

import itertools
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.harness.cluster import Cluster

pytestmark = pytest.mark.slow
# A submitter's pace: at most one submit per interval (about 100/s each). Writes keep
# flowing through every fault and membership change, which is what these tests need;
# submitting flat out only spent the machine's CPU, slowing the elections and catch-ups
# under test on a loaded 2-core machine.
SUBMIT_INTERVAL_S = 0.01


class Load:
    """Submitters and a claim/complete worker, rotating over nodes on any failure.

    Records every acknowledged submit (201) with the time of its ack."""

    def __init__(self, c: Cluster, task_type: str, submitters: int = 3,
                 tenants: tuple[str, ...] = ()) -> None:
        """`tenants`: submits take turns over them (a sharded cluster's shards)."""
        self.c, self.tt, self.tenants = c, task_type, tenants
        self.acked: dict[str, float] = {}
        self.completed: set[str] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._submit, args=(i,), daemon=True)
                        for i in range(submitters)]
        self.threads.append(threading.Thread(target=self._work, daemon=True))

    def __enter__(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _nodes(self, start: int):
        return itertools.cycle(self.c.ids[start % len(self.c.ids):] +
                               self.c.ids[:start % len(self.c.ids)])

    def _submit(self, n: int) -> None:
        nodes = self._nodes(n)
        node = next(nodes)
        with httpx.Client(timeout=5) as client:
            for i in itertools.count():
                if self.stop.is_set():
                    return
                key = f"{self.tt}-{n}-{i}"
                body = {"task_type": self.tt, "idempotency_key": key}
                if self.tenants:
                    body["tenant"] = self.tenants[i % len(self.tenants)]
                while not self.stop.is_set():   # retry the same key until acknowledged
                    try:
                        r = client.post(self.c.url(node) + "/v1/tasks", json=body)
                        if r.status_code == 201:
                            with self.lock:
                                self.acked[r.json()["task_id"]] = time.monotonic()
                            break
                    except httpx.HTTPError:
                        pass
                    node = next(nodes)
                self.stop.wait(SUBMIT_INTERVAL_S)

    def _work(self) -> None:
        nodes = self._nodes(2)
        node = next(nodes)
        with httpx.Client(timeout=10) as client:
            while not self.stop.is_set():
                try:
                    r = client.post(self.c.url(node) + "/v1/claims", json={
                        "worker_id": "w", "task_types": [self.tt], "max_tasks": 20,
                        "wait_s": 1, "lease_s": 30})
                    if r.status_code != 200:
                        node = next(nodes)
                        continue
                    done = [{"task_id": t["task_id"], "fencing_token": t["fencing_token"],
                             "result": None} for t in r.json()["tasks"]]
                    if done:
                        r = client.post(self.c.url(node) + "/v1/completions",
                                        json={"completions": done})
                        if r.status_code == 200:
                            with self.lock:
                                self.completed.update(
                                    x["task_id"] for x in r.json()["results"] if "state" in x)
                except httpx.HTTPError:
                    node = next(nodes)

    def wait_acks(self, n: int, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < n:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acks"
            time.sleep(0.01)


UNAVAILABLE_FOR_S_MAX = 30.0    # a read may meet a leadership move (503): asked again
READERS = 8     # reads in flight: the leader batches their barriers (thousands of tasks)


def assert_all_present(c: Cluster, node: str, task_ids) -> None:
    """Every task id is known, read linearizably (through the leader's barrier). A 503 or
    504 (no leader for a moment: an election, a leader spread's transfer) says nothing
    of the task, and is asked again for up to UNAVAILABLE_FOR_S_MAX in all."""
    deadline = time.monotonic() + UNAVAILABLE_FOR_S_MAX
    with httpx.Client(timeout=10, limits=httpx.Limits(max_connections=READERS)) as client:
        def status_of(tid: str) -> int:
            while True:
                r = client.get(c.url(node) + f"/v1/tasks/{tid}?consistency=linearizable")
                if r.status_code not in (503, 504) or time.monotonic() > deadline:
                    return r.status_code
                time.sleep(0.1)
        with ThreadPoolExecutor(READERS) as pool:
            statuses = list(pool.map(status_of, task_ids))
    missing = [(tid, st) for tid, st in zip(task_ids, statuses) if st != 200]
    assert not missing, f"{len(missing)} acknowledged tasks missing: {missing[:5]}"


def wait_equal_digests(c: Cluster, timeout_s: float = 20) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        status = {i: c.self_status(i) for i in c.ids}
        views = {(s["applied_seq"], s["digest"]) for s in status.values() if s}
        if all(status.values()) and len(views) == 1:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def test_kill_leader_under_load_loses_nothing_and_recovers(fresh_cluster: Cluster):
    c = fresh_cluster
    old = c.wait_leader()
    with Load(c, "load-" + uuid.uuid4().hex[:6]) as load:
        load.wait_acks(50)
        c.kill(old)
        killed_at = time.monotonic()
        new = c.wait_leader(exclude=[old])
        before = len(load.acked)
        load.wait_acks(before + 20)
        with load.lock:
            first_after = min(t for t in load.acked.values() if t > killed_at)
        recovery_s = first_after - killed_at
        print(f"leader {old} killed: first acknowledged write {recovery_s:.2f} s later "
              f"(new leader {new})")
        assert recovery_s < 5
        status, view = c.call(new, "GET", "/v1/cluster")
        assert status == 200 and view["leader"] == new
        assert {n["id"]: n["reachable"] for n in view["nodes"]}[old] is False
        c.start_node(old)
        load.wait_acks(len(load.acked) + 20)
    assert_all_present(c, new, list(load.acked))
    assert load.completed, "the worker completed nothing"
    status = wait_equal_digests(c)
    assert status[old]["reachable"] and status[old]["applied_seq"] == status[new]["applied_seq"]


def test_kill_all_nodes_then_restart_keeps_every_acknowledged_task(fresh_cluster: Cluster):
    c = fresh_cluster
    c.wait_leader()
    with Load(c, "crash-" + uuid.uuid4().hex[:6]) as load:
        load.wait_acks(60)
        for i in c.ids:
            c.kill(i)
    restart_and_check(c, list(load.acked))


def test_kill_all_nodes_after_log_compaction_keeps_every_acknowledged_task(tmp_path):
    """With a tiny compaction threshold every node snapshots and drops the front of its log;
    after kill -9 of all three, each must rebuild from its snapshot plus the log tail."""
    compact_often = "\n[cluster.compaction]\nmin_entries = 50\n"
    with Cluster(tmp_path, extra_toml=compact_often) as c:
        c.start()
        c.wait_leader()
        snapshots = [c.dir / "data" / i / "snapshot.bin" for i in c.ids]
        with Load(c, "compact-" + uuid.uuid4().hex[:6]) as load:
            deadline = time.monotonic() + 60
            while not all(p.exists() for p in snapshots):
                assert time.monotonic() < deadline, [p for p in snapshots if not p.exists()]
                time.sleep(0.05)
            load.wait_acks(len(load.acked) + 20)     # a log tail past the snapshot
            for i in c.ids:
                c.kill(i)
        restart_and_check(c, list(load.acked))


def restart_and_check(c: Cluster, acked: list) -> None:
    """Start every node again: all acknowledged tasks are there and the digests agree."""
    c.start()
    leader = c.wait_leader()
    assert_all_present(c, leader, acked)
    wait_equal_digests(c)


def test_transfer_leadership_and_a_clean_stop(fresh_cluster: Cluster):
    c = fresh_cluster
    old = c.wait_leader()
    target = c.followers(old)[0]
    other = c.followers(old)[1]
    status, body = c.call(other, "POST", "/v1/cluster/transfer-leadership", {"to": target})
    assert status == 202, body
    deadline = time.monotonic() + 15
    while c.wait_leader() != target:
        assert time.monotonic() < deadline, "leadership did not move"
    assert c.stop(old) == 0                     # SIGTERM: close the app, stop Raft, exit 0
    assert "event=stopped" in c.log(old)
    status, body = c.call(other, "POST", "/v1/tasks", {"task_type": "after-stop"})
    assert status == 201, body
    c.start_node(old)
    c.wait_leader()
    wait_equal_digests(c)


def test_sigterm_ends_long_polls_at_once(fresh_cluster: Cluster):
    c = fresh_cluster
    leader = c.wait_leader()
    follower = c.followers(leader)[0]
    polls = {}
    for node in (leader, follower):
        polls[node] = threading.Thread(target=lambda n=node: polls.__setitem__(
            n + ":answer", c.call(n, "POST", "/v1/claims", {
                "worker_id": "w", "task_types": ["never"], "wait_s": 50}, timeout_s=60)),
            daemon=True)
        polls[node].start()
    deadline = time.monotonic() + 10
    while (c.self_status(leader) or {}).get("waiting_claims", 0) < 2:
        assert time.monotonic() < deadline, "the polls never reached the leader"
        time.sleep(0.01)
    start = time.monotonic()
    assert c.stop(follower) == 0
    assert c.stop(leader) == 0
    for node in (leader, follower):
        polls[node].join(10)
        status, body = polls[node + ":answer"]
        assert status == 503 and body["error"]["code"] == "unavailable", (node, body)
    assert time.monotonic() - start < 10     # not the polls' 50 s
