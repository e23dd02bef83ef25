"""The Raft port of real tsnode processes (DESIGN.md section 6): no exposed port without a
secret, pysyncobj's admin messages refused, oversized messages cut off, and a secret cluster
that ignores a stranger who does not know it."""
from __future__ import annotations

import pickle
import socket
import struct
import subprocess
import zlib

import pytest

from tests.harness.cluster import TSNODE, Cluster
from tests.harness.ports import free_ports

pytestmark = pytest.mark.timeout(180)


def frame(message) -> bytes:
    """One pysyncobj message as a stranger would send it: length, zlib(pickle)."""
    data = zlib.compress(pickle.dumps(message), 3)
    return struct.pack("i", len(data)) + data


def read_frame(sock: socket.socket):
    """The next message, or None when the node closed the connection."""
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack("i", buf[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    (size,) = struct.unpack("i", buf[:4])
    return pickle.loads(zlib.decompress(buf[4:4 + size]))


def raft_socket(c: Cluster, node_id: str) -> socket.socket:
    host, port = c.raft[node_id].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def membership(c: Cluster, node_id: str) -> dict:
    with raft_socket(c, node_id) as s:
        s.sendall(frame(["status"]))
        status = read_frame(s)
    assert isinstance(status, dict), status
    # Who the members are, not how their connections feel right now.
    return {"partners": sorted(k for k in status if k.startswith("partner_node_status_server_")),
            **{k: status[k] for k in ("partner_nodes_count", "readonly_nodes_count", "self")}}


@pytest.mark.parametrize("raft_host", ["0.0.0.0", "10.11.12.13"])
def test_tsnode_refuses_a_non_loopback_raft_address_without_a_secret(tmp_path, raft_host):
    cfg = tmp_path / "cluster.toml"
    raft, http = free_ports(2)
    cfg.write_text(f'[cluster]\nname = "t"\n\n[[node]]\nid = "n1"\n'
                   f'raft = "{raft_host}:{raft}"\nhttp = "127.0.0.1:{http}"\n'
                   'data_dir = "data/n1"\n')
    proc = subprocess.run([TSNODE, "--config", str(cfg), "--id", "n1"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "secret" in proc.stderr and "raft" in proc.stderr, proc.stderr
    assert not (tmp_path / "data").exists()       # refused before anything was started


@pytest.fixture(scope="module")
def c(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("raftport")) as cl:
        cl.start()
        cl.leader = cl.wait_leader()
        yield cl


@pytest.mark.parametrize("message", [
    ["add", "127.0.0.1:1"],
    ["remove", "PEER"],
    ["set_version", 99],
    ["transfer", "PEER"],
    ["members"],
    ["bogus"],
])
def test_admin_messages_are_refused_and_membership_is_unchanged(c, message):
    before = membership(c, c.leader)
    assert before["partner_nodes_count"] == 2
    peer = c.raft[c.followers(c.leader)[0]]
    message = [peer if part == "PEER" else part for part in message]
    with raft_socket(c, c.leader) as s:
        s.sendall(frame(message))
        assert read_frame(s) == "FAIL refused"
        assert read_frame(s) is None                 # and the node hung up
    assert membership(c, c.leader) == before
    assert c.wait_leader() == c.leader               # no transfer happened
    status, body = c.call(c.leader, "GET", "/v1/cluster")
    assert status == 200 and [n["id"] for n in body["nodes"]] == c.ids
    assert all(n["reachable"] for n in body["nodes"]), body
    status, body = c.call(c.followers(c.leader)[1], "POST", "/v1/tasks", {"task_type": "t"})
    assert status == 201, body                       # and replication still works


def test_a_stranger_cannot_pose_as_an_observer_or_an_unknown_node(c):
    for identity in ("readonly", "127.0.0.1:1"):
        with raft_socket(c, c.leader) as s:
            s.sendall(frame(identity))
            assert read_frame(s) == "FAIL refused"
    assert membership(c, c.leader)["readonly_nodes_count"] == 0


def test_an_oversized_message_is_cut_off_before_it_is_buffered(c):
    with raft_socket(c, c.leader) as s:
        s.sendall(struct.pack("i", 2**31 - 1) + b"x" * 65536)
        assert s.recv(1) == b""
    with raft_socket(c, c.leader) as s:
        s.sendall(struct.pack("i", -5))
        assert s.recv(1) == b""
    assert c.call(c.leader, "GET", "/readyz")[0] == 200


def test_a_secret_cluster_works_and_ignores_a_stranger_without_the_secret(tmp_path):
    with Cluster(tmp_path, secret="correct horse battery staple") as sc:
        sc.start()
        leader = sc.wait_leader()
        status, body = sc.call(leader, "POST", "/v1/tasks", {"task_type": "t"})
        assert status == 201, body
        for message in (["status"], ["add", "127.0.0.1:1"]):
            with raft_socket(sc, leader) as s:
                s.settimeout(3)
                s.sendall(frame(message))
                try:
                    answer = read_frame(s)
                except (socket.timeout, zlib.error, pickle.UnpicklingError):
                    answer = None                    # nothing a stranger can read
                assert not isinstance(answer, dict) and answer != "SUCCESS", answer
        assert sc.wait_leader() == leader
        status, body = sc.call(leader, "GET", "/v1/cluster")
        assert status == 200 and all(n["reachable"] for n in body["nodes"]), body


def test_raft_and_http_listen_on_their_configured_address_only(c):
    """Bound to 127.0.0.1, not every interface: another loopback address is refused."""
    for addr in (c.raft[c.leader], c.http[c.leader]):
        port = int(addr.rsplit(":", 1)[1])
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", port), timeout=5).close()
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
