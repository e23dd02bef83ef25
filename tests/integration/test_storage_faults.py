"""Storage faults on real clusters: a damaged log or snapshot stops the node loudly (never a
node that serves reads from a state it can no longer advance), and `tsnode --rejoin-empty`
brings it back from the leader."""
from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.harness.cluster import Cluster
from tests.harness.waits import wait_until
from tests.integration.test_node_faults import wait_equal_digests

pytestmark = pytest.mark.slow

STOP_WAIT_S = 30
SMALL_DISK_BYTES = 8 << 20
FILL_PAYLOAD_CHARS = 60_000      # under the 64 KiB payload limit
FILL_DEADLINE_S = 90
STORAGE_ERROR_EXIT_CODE = 74     # node/raft/storage_faults.py


def submit_marked(c: Cluster, node: str, marks: list[str]) -> int:
    """Submit one task per mark (the mark in its payload); the highest applied_seq seen."""
    seq = 0
    for mark in marks:
        status, body = c.call(node, "POST", "/v1/tasks",
                              {"task_type": "storage", "payload": {"mark": mark}})
        assert status == 201, body
        seq = max(seq, body["applied_seq"])
    return seq


def flip_every_copy(file: Path, needle: bytes) -> int:
    """Flip bytes inside every copy of `needle` in `file` (LMDB keeps old page copies)."""
    data = bytearray(file.read_bytes())
    flipped, at = 0, data.find(needle)
    while at >= 0:
        for k in range(len(needle)):
            data[at + k] ^= 0x5A
        flipped += 1
        at = data.find(needle, at + 1)
    file.write_bytes(bytes(data))
    return flipped


def assert_stops_loudly(c: Cluster, node: str, *names: str) -> None:
    code = c.procs[node].wait(timeout=STOP_WAIT_S)
    log = c.log(node, tail_chars=20_000)
    assert code != 0, log
    assert "CRITICAL" in log and "storage corrupt" in log, log
    for name in names:
        assert name in log, (name, log)


def test_a_flipped_log_entry_stops_the_follower_and_rejoin_empty_restores_it(tmp_path):
    with Cluster(tmp_path, size=3, fast_raft=False) as c:
        c.start()
        leader = c.wait_leader()
        run = uuid.uuid4().hex[:8]
        seq = submit_marked(c, leader, [f"mark-{run}-{i:03d}" for i in range(30)])
        c.wait_applied(seq)
        victim = c.followers(leader)[0]
        assert c.stop(victim) == 0
        data_mdb = c.data_dir(victim) / "raft-log" / "data.mdb"
        assert flip_every_copy(data_mdb, f"mark-{run}-010".encode()) >= 1

        c.start_node(victim)
        assert_stops_loudly(c, victim, "data.mdb", "log index")

        term_before = c.self_status(leader)["term"]
        seq = submit_marked(c, leader, [f"after-{run}-{i}" for i in range(10)])
        c.start_node(victim, "--rejoin-empty")
        c.wait_applied(seq, [victim], timeout_s=30)
        status = wait_equal_digests(c, timeout_s=30)
        assert status[victim]["leader"] == leader
        assert status[leader]["term"] == term_before, "the rejoining node caused an election"
        # the marker goes on the Raft thread's next tick after the catch-up (a heartbeat or
        # at most `idle_tick_max_s` later), not with the apply that made the digests equal
        wait_until(lambda: not (c.data_dir(victim) / "REJOINING").exists(), 5.0,
                   "the rejoin marker to go")
        # the log line follows the marker's removal (made durable first), so wait for it too
        wait_until(lambda: "rejoined: caught up" in c.log(victim, tail_chars=20_000), 5.0,
                   "the node to log that it rejoined")
        # It votes again once caught up: a later election can use it.
        assert c.stop(leader) == 0
        assert c.wait_leader(exclude=[leader]) in c.followers(leader)


def test_a_damaged_snapshot_stops_the_node_naming_the_file(tmp_path):
    compact_often = "\n[cluster.compaction]\nmin_entries = 20\n"
    with Cluster(tmp_path, size=3, extra_toml=compact_often, fast_raft=False) as c:
        c.start()
        leader = c.wait_leader()
        victim = c.followers(leader)[0]
        snapshot = c.data_dir(victim) / "snapshot.bin"
        run = uuid.uuid4().hex[:8]
        deadline = time.monotonic() + 60
        i = 0
        while not snapshot.exists():
            assert time.monotonic() < deadline, "no snapshot was taken"
            submit_marked(c, leader, [f"snap-{run}-{i:04d}"])
            i += 1
        assert c.stop(victim) == 0
        data = bytearray(snapshot.read_bytes())
        data[len(data) // 2] ^= 0xFF            # inside the state
        snapshot.write_bytes(bytes(data))
        c.start_node(victim)
        assert_stops_loudly(c, victim, "snapshot.bin", "snapshot at log index")
        c.start_node(victim, "--rejoin-empty")
        wait_equal_digests(c, timeout_s=30)


@pytest.fixture
def small_disk_for_n3(tmp_path):
    """n3's data dir on an 8 MiB tmpfs (needs the right to mount, as root in a container)."""
    mnt = tmp_path / "data" / "n3"
    mnt.mkdir(parents=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK_BYTES}", "tmpfs",
                        str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.strip() or r.returncode}); "
                    "the disk-full test needs one")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def submit_anywhere(c: Cluster, body: dict) -> bool:
    for node in c.ids:
        if not c.alive(node):
            continue
        try:
            status, _ = c.call(node, "POST", "/v1/tasks", body, timeout_s=10)
        except httpx.HTTPError:
            continue
        if status == 201:
            return True
    return False


def test_a_full_disk_stops_that_node_loudly_and_the_majority_goes_on(tmp_path, small_disk_for_n3):
    with Cluster(tmp_path, size=3, fast_raft=False) as c:
        c.start()
        c.wait_leader()
        filler = {"task_type": "fill", "payload": {"blob": "x" * FILL_PAYLOAD_CHARS}}
        deadline = time.monotonic() + FILL_DEADLINE_S
        while c.alive("n3"):
            assert time.monotonic() < deadline, "n3 never ran out of disk"
            submit_anywhere(c, filler)
        assert c.procs["n3"].wait(timeout=STOP_WAIT_S) == STORAGE_ERROR_EXIT_CODE
        log = c.log("n3", tail_chars=20_000)
        # LMDB on a full tmpfs reports EIO from its commit, on a full disk ENOSPC
        assert "CRITICAL" in log and "storage error while syncing the Raft log" in log, log
        leader = c.wait_leader(exclude=["n3"])
        for i in range(5):
            status, body = c.call(leader, "POST", "/v1/tasks", {"task_type": f"after-{i}"})
            assert status == 201, body
