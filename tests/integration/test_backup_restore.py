"""Backup and restore on real clusters (DESIGN.md section 6.1): `tsctl backup` under load,
`tsnode --restore` into a fresh cluster, and the files a restore refuses."""
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.harness.cluster import TSNODE, Cluster
from tests.harness.waits import wait_until

def _dir(tmp_path: Path, name: str) -> Path:
    (tmp_path / name).mkdir()
    return tmp_path / name


TSCTL = shutil.which("tsctl") or str(Path(sys.executable).with_name("tsctl"))


def _tsctl(c: Cluster, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([TSCTL, "--url", ",".join(c.urls), "--timeout", "60", *args],
                          capture_output=True, text=True, timeout=timeout_s)


def _restore_refusal(c: Cluster, node_id: str, backup: Path) -> subprocess.CompletedProcess:
    """`tsnode --restore` that must refuse before it starts: it exits by itself."""
    return subprocess.run([TSNODE, "--config", str(c.config_path), "--id", node_id,
                           "--restore", str(backup)], capture_output=True, text=True,
                          timeout=60)


def _claim(c: Cluster, node_id: str, task_type: str, n: int) -> list[dict]:
    s, b = c.call(node_id, "POST", "/v1/claims", {
        "worker_id": "w-1", "task_types": [task_type], "max_tasks": n, "wait_s": 5,
        "lease_s": 600})
    assert s == 200, b
    return b["tasks"]


class _Submitter(threading.Thread):
    """Submits tasks until stopped, noting each acknowledged id with its time."""

    def __init__(self, c: Cluster, node_id: str) -> None:
        super().__init__(daemon=True)
        self.url = c.url(node_id)
        self.acked: list[tuple[float, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=30) as http:
            i = 0
            while not self.stop.is_set():
                r = http.post(self.url + "/v1/tasks", json={"tasks": [
                    {"task_type": "load", "payload": {"i": i + k}} for k in range(20)]})
                assert r.status_code == 201, r.text
                now = time.monotonic()
                self.acked += [(now, t["task_id"]) for t in r.json()["tasks"]]
                i += 20


def _seed_source(src: Cluster, leader: str) -> tuple[dict[str, str], int]:
    """Tasks in several states, a schedule, a tenant and a paused queue: (task id -> state,
    highest token)."""
    s, b = src.call(leader, "PUT", "/v1/tenants/acme", {"max_running": 7, "weight": 3})
    assert s == 200, b
    s, b = src.call(leader, "POST", "/v1/queues/pause", {"task_type": "bank", "reason": "r"})
    assert s == 200, b
    s, b = src.call(leader, "PUT", "/v1/schedules/nightly", {
        "cron": "0 3 * * *", "task": {"task_type": "report"}, "tenant": "acme"})
    assert s in (200, 201), b
    s, b = src.call(leader, "POST", "/v1/tasks", {"tasks": [
        {"task_type": "work", "tenant": "acme", "idempotency_key": f"k-{i}"}
        for i in range(30)]})
    assert s == 201, b
    claimed = _claim(src, leader, "work", 5)
    assert len(claimed) == 5
    done = claimed[0]
    s, b = src.call(leader, "POST", f"/v1/tasks/{done['task_id']}/complete",
                    {"fencing_token": done["fencing_token"], "result": {"ok": 1}})
    assert s == 200, b
    s, b = src.call(leader, "GET", "/v1/tasks?limit=1000")
    assert s == 200, b
    states = {t["task_id"]: t["state"] for t in b["tasks"]}
    assert sorted(set(states.values())) == ["completed", "pending", "running"]
    return states, max(t["fencing_token"] for t in claimed)


def test_backup_under_load_restores_into_a_fresh_cluster(tmp_path):
    backup = tmp_path / "cluster.backup"
    with Cluster(_dir(tmp_path, "src")) as src:
        src.start()
        leader = src.wait_leader()
        states, top_token = _seed_source(src, leader)
        load = _Submitter(src, src.followers(leader)[0])
        load.start()
        while len(load.acked) < 200:
            time.sleep(0.01)
        started = time.monotonic()
        out = _tsctl(src, "backup", str(backup))
        load.stop.set()
        load.join(60)
        assert out.returncode == 0, out.stderr + src.log(leader)
        assert "shard 0 at log index" in out.stdout
        before = [tid for at, tid in load.acked if at < started]
        assert len(before) >= 200 and len(load.acked) > len(before), "no load during the backup"
        states.update({tid: "pending" for tid in before})
        # tokens the old cluster hands out after the backup, which the backup cannot know
        after_backup = _claim(src, src.wait_leader(), "work", 5)
        assert after_backup
        top_token = max(top_token, *(t["fencing_token"] for t in after_backup))
        for t in after_backup:
            states[t["task_id"]] = "pending"        # pending at the backup's moment
    with Cluster(_dir(tmp_path, "dst")) as dst:
        for i in dst.ids:
            dst.start_node(i, "--restore", str(backup))
        leader = dst.wait_leader()
        for tid, state in states.items():
            s, b = dst.call(leader, "GET", f"/v1/tasks/{tid}")
            assert s == 200 and b["state"] == state, (tid, state, b)
        s, b = dst.call(leader, "GET", "/v1/schedules/nightly?tenant=acme")
        assert s == 200, b
        s, b = dst.call(leader, "GET", "/v1/tenants/acme")
        assert s == 200 and b["max_running"] == 7 and b["weight"] == 3, b
        s, b = dst.call(leader, "GET", "/v1/queues")
        assert s == 200 and [(p["task_type"], p["reason"]) for p in b["pauses"]] == [
            ("bank", "r")], b
        s, b = dst.call(leader, "POST", "/v1/tasks", {"task_type": "work", "tenant": "acme",
                                                      "idempotency_key": "k-3"})
        assert s == 201 and b["duplicate"] is True, b     # idempotency keys survive
        claimed = _claim(dst, dst.followers(leader)[0], "work", 1)
        # above every token the old cluster handed out, before the backup and after it
        assert claimed and claimed[0]["fencing_token"] > top_token, (claimed, top_token)
        # every replica restored the same state and applies the same log after it
        s, b = dst.call(leader, "POST", "/v1/tasks", {"task_type": "after"})
        assert s == 201, b
        dst.wait_applied(b["applied_seq"])
        digests = {dst.self_status(i)["digest"] for i in dst.ids}
        assert len(digests) == 1, digests
        # a node whose data dir is not empty refuses a restore
        refused = _restore_refusal(dst, "n1", backup)
        assert refused.returncode == 2 and "is not empty" in refused.stderr, refused.stderr


def test_restore_refuses_a_damaged_file_and_another_clusters(tmp_path):
    backup = tmp_path / "b.backup"
    with Cluster(_dir(tmp_path, "src")) as src:
        src.start()
        leader = src.wait_leader()
        s, b = src.call(leader, "POST", "/v1/tasks", {"task_type": "t"})
        assert s == 201, b
        out = _tsctl(src, "backup", str(backup))
        assert out.returncode == 0, out.stderr
    damaged = tmp_path / "damaged.backup"
    raw = bytearray(backup.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    damaged.write_bytes(bytes(raw))
    other = Cluster(_dir(tmp_path, "other"), name="other")
    same = Cluster(_dir(tmp_path, "same"))
    try:
        refused = _restore_refusal(same, "n1", damaged)
        assert refused.returncode == 2, refused.stderr
        assert "checksum mismatch" in refused.stderr, refused.stderr
        refused = _restore_refusal(other, "n1", backup)
        assert refused.returncode == 2, refused.stderr
        assert "backup of cluster 'test'" in refused.stderr, refused.stderr
        assert not other.data_dir("n1").exists() and not same.data_dir("n1").exists()
    finally:
        other.close()
        same.close()


def test_a_sharded_cluster_backs_up_every_shard_and_restores_into_one(tmp_path):
    backup = tmp_path / "sharded.backup"
    with Cluster(_dir(tmp_path, "src"), shards=2) as src:
        src.start()
        src.wait_shard_leaders()
        s, b = src.call("n1", "POST", "/v1/tasks", {"tasks": [
            {"task_type": "t", "tenant": f"tenant-{i}"} for i in range(20)]})
        assert s == 201, b
        ids = {t["task_id"] for t in b["tasks"]}
        assert len({tid[:2] for tid in ids}) == 2, "the tasks went to one shard only"
        out = _tsctl(src, "backup", str(backup))
        assert out.returncode == 0, out.stderr
        assert "(2 shard(s))" in out.stdout and "shard 1 at log index" in out.stdout
    # Into five nodes on other ports: a sharded cluster changes its nodes this way
    # (docs/operations.md 8.1; online changes need one shard group)
    with Cluster(_dir(tmp_path, "dst"), size=5, shards=2) as dst:
        for i in dst.ids:
            dst.start_node(i, "--restore", str(backup))
        dst.wait_shard_leaders()
        for tid in ids:
            # through each shard's leader: n5's own replica may still be loading the
            # restored snapshot (a local read answers from what it has applied)
            b = _restored(dst, "n5", f"/v1/tasks/{tid}")
            assert b["state"] == "pending", b
        shards = dst.shard_status("n1")
        assert shards and all(len(s["nodes"]) == 5 for s in shards), shards
    # 2 -> 1: a single group holds every task, whatever shard its id names
    with Cluster(_dir(tmp_path, "single")) as single:
        for i in single.ids:
            single.start_node(i, "--restore", str(backup))
        leader = single.wait_leader()
        for tid in ids:
            b = _restored(single, "n3", f"/v1/tasks/{tid}")
            assert b["state"] == "pending", b
        s, b = single.call(leader, "GET", "/v1/tasks?limit=1000")
        assert s == 200 and {t["task_id"] for t in b["tasks"]} == ids, b
        _wait_equal_digests(single, [single.ids])


def _restored(c: Cluster, node: str, path: str) -> dict:
    """A read of the restored state through its shard's leader (`consistency=linearizable`),
    once the node can make one: a node just started with --restore may still be loading
    its replicas, which answer 503 until they know their leader."""
    sep = "&" if "?" in path else "?"

    def read() -> dict | None:
        s, b = c.call(node, "GET", f"{path}{sep}consistency=linearizable")
        assert s in (200, 503), (node, path, s, b)
        return b if s == 200 else None
    return wait_until(read, 30, f"{node} to read {path} from the restored state")


def _wait_equal_digests(c: Cluster, groups: list[list[str]], timeout_s: float = 30) -> None:
    """Every group's replicas report one applied_seq and one digest (a write is applied on
    each first, so that they have something to agree on after the restore)."""
    deadline = time.monotonic() + timeout_s
    for group in groups:
        while True:
            st = [c.self_status(i) for i in group]
            seen = {(x["applied_seq"], x["digest"]) for x in st if x}
            if len(seen) == 1 and all(st):
                break
            assert time.monotonic() < deadline, f"replicas disagree: {st}"
            time.sleep(0.05)


def _shard_digests(c: Cluster, timeout_s: float = 30) -> dict[int, str]:
    """{shard: digest} once every replica of every shard reports the same one."""
    deadline = time.monotonic() + timeout_s
    while True:
        shards = c.shard_status("n1") or []
        seen = {s["shard"]: {(n["applied_seq"], n["digest"]) for n in s["nodes"]}
                for s in shards}
        if len(seen) == c.shards and all(len(v) == 1 and None not in next(iter(v))
                                         for v in seen.values()):
            return {s: next(iter(v))[1] for s, v in seen.items()}
        assert time.monotonic() < deadline, f"replicas disagree: {shards}"
        time.sleep(0.1)


def test_a_single_group_backup_restores_into_three_shards(tmp_path):
    from tsched.node.topology import shard_of_tenant
    backup = tmp_path / "one.backup"
    tenants = [f"tenant-{i}" for i in range(9)]
    with Cluster(_dir(tmp_path, "src")) as src:
        src.start()
        leader = src.wait_leader()
        states, top_token = _seed_source(src, leader)
        s, b = src.call(leader, "POST", "/v1/tasks", {"tasks": [
            {"task_type": "spread", "tenant": t, "idempotency_key": f"i-{t}"}
            for t in tenants]})
        assert s == 201, b
        by_tenant = {t["task_id"]: tenant for t, tenant in zip(b["tasks"], tenants)}
        states.update({tid: "pending" for tid in by_tenant})
        out = _tsctl(src, "backup", str(backup))
        assert out.returncode == 0, out.stderr
    assert len({shard_of_tenant(t, 3) for t in tenants}) == 3, "the tenants use one shard"
    with Cluster(_dir(tmp_path, "dst"), shards=3) as dst:
        for i in dst.ids:
            dst.start_node(i, "--restore", str(backup))
        dst.wait_shard_leaders()
        for node in dst.ids:     # every old id (no shard prefix) from any node's router
            for tid, state in states.items():
                b = _restored(dst, node, f"/v1/tasks/{tid}")
                assert b["state"] == state, (node, tid, state, b)
        for tid, tenant in by_tenant.items():
            b = _restored(dst, "n2", f"/v1/tasks?tenant={tenant}")
            assert [t["task_id"] for t in b["tasks"]] == [tid], b
            s, b = dst.call("n3", "GET", f"/v1/tasks/{tid}")
            assert b["shard"] == shard_of_tenant(tenant, 3), b
            s, b = dst.call("n1", "POST", "/v1/tasks", {"task_type": "spread", "tenant": tenant,
                                                        "idempotency_key": f"i-{tenant}"})
            assert s == 201 and b["duplicate"] is True and b["task_id"] == tid, b
        s, b = dst.call("n1", "GET", "/v1/schedules/nightly?tenant=acme")
        assert s == 200, b
        s, b = dst.call("n2", "GET", "/v1/tenants/acme")
        assert s == 200 and b["max_running"] == 7 and b["weight"] == 3, b
        s, b = dst.call("n3", "GET", "/v1/queues")      # on every shard: none missing
        assert s == 200 and b["pauses"] and b["pauses"][0]["task_type"] == "bank", b
        assert "missing_shards" not in b["pauses"][0], b
        claimed = _claim(dst, "n3", "work", 1)
        assert claimed and claimed[0]["fencing_token"] > top_token, (claimed, top_token)
        s, b = dst.call("n2", "POST", f"/v1/tasks/{claimed[0]['task_id']}/complete",
                        {"fencing_token": claimed[0]["fencing_token"], "result": {}})
        assert s == 200, b
        s, b = dst.call("n1", "GET", "/v1/tasks/" + "ab" * 16)
        assert s == 404 and b["error"]["code"] == "not_found", b
        assert len(_shard_digests(dst)) == 3
