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
    """Tasks in several states, a schedule and a tenant: (task id -> state, highest token)."""
    s, b = src.call(leader, "PUT", "/v1/tenants/acme", {"max_running": 7, "weight": 3})
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


def test_a_sharded_cluster_backs_up_every_shard_and_refuses_another_shard_count(tmp_path):
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
    with Cluster(_dir(tmp_path, "dst"), shards=2) as dst:
        for i in dst.ids:
            dst.start_node(i, "--restore", str(backup))
        dst.wait_shard_leaders()
        for tid in ids:
            s, b = dst.call("n2", "GET", f"/v1/tasks/{tid}")
            assert s == 200 and b["state"] == "pending", b
    single = Cluster(_dir(tmp_path, "single"))
    try:
        refused = _restore_refusal(single, "n1", backup)
        assert refused.returncode == 2, refused.stderr
        assert "holds 2 shard(s); this cluster has shards = 1" in refused.stderr, refused.stderr
    finally:
        single.close()
