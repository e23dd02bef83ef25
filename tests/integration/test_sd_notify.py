"""A node started by systemd (`Type=notify`, deploy/systemd/tsnode@.service) says READY=1 once
its HTTP API answers, and STOPPING=1 when it stops; a node started otherwise sends nothing."""
from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import pytest

from tsched.node.ops.sd_notify import Notifier

from tests.harness.cluster import Cluster

pytestmark = pytest.mark.slow
RECV_TIMEOUT_S = 60


def test_a_node_says_ready_when_it_serves_and_stopping_when_it_stops(tmp_path: Path) -> None:
    # Unix socket paths are short (108 bytes): not under pytest's deep tmp_path.
    with tempfile.TemporaryDirectory(prefix="tsn-") as short, \
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        path = str(Path(short) / "notify")
        sock.bind(path)
        sock.settimeout(RECV_TIMEOUT_S)
        with Cluster(tmp_path, node_env={"n1": {"NOTIFY_SOCKET": path}}) as c:
            c.start()
            assert sock.recv(4096) == b"READY=1"
            assert c.self_status("n1") is not None          # it serves when it says so
            c.wait_leader()
            assert c.stop("n1") == 0
            assert sock.recv(4096) == b"STOPPING=1"


def test_the_notifier_speaks_to_the_abstract_namespace_and_hides_the_variable() -> None:
    name = f"tsched-test-{id(object())}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(RECV_TIMEOUT_S)
        environ = {"NOTIFY_SOCKET": "@" + name, "OTHER": "x"}
        notifier = Notifier(environ)
        assert environ == {"OTHER": "x"}     # a child process started now inherits nothing
        assert notifier.send("READY=1") is True
        assert sock.recv(4096) == b"READY=1"


def test_without_systemd_nothing_is_sent() -> None:
    assert Notifier({}).send("READY=1") is False
