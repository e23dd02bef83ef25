"""dial_overrides through relays, and leadership under a partition: a cut-off follower
reports no leader, and an isolated leader steps down."""
from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from tests.harness.raft_options import FAST
from tests.harness.waits import wait_until
from tests.integration.raft_support import cluster_spec, leader_of, mini_kit, propose_sync, submit
from tsched.node.raft.replica import Replica

pytestmark = pytest.mark.timeout(120)


class Relay:
    """Forwards one listening port to `target`; `cut()` drops every connection for good."""

    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self.accepted = 0
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                if self.closed:
                    client.close()
                    upstream.close()
                    return
                self.accepted += 1
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self):
        with self.lock:
            self.closed = True
            conns, self.conns = self.conns, []
        self.server.close()
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.fixture
def relayed(tmp_path):
    specs = cluster_spec(tmp_path)
    relays: dict[tuple[str, str], Relay] = {}
    replicas = []
    for s in specs:
        overrides = {}
        for pid, addr in s["peers"].items():
            relays[(s["id"], pid)] = Relay(addr)
            overrides[addr] = relays[(s["id"], pid)].address
        replicas.append(Replica(self_id=s["id"], self_raft=s["raft"], peers=s["peers"],
                                data_dir=Path(s["data_dir"]), options=FAST, machine=mini_kit(),
                                dial_overrides=overrides))
    for r in replicas:
        r.start()
    yield replicas, relays
    for r in replicas:
        r.stop()
    for relay in relays.values():
        relay.cut()


def isolate(node_id, relays):
    for (a, b), relay in relays.items():
        if node_id in (a, b):
            relay.cut()


def test_dials_go_through_the_overrides_one_connection_per_pair(relayed):
    replicas, relays = relayed
    leader = wait_until(lambda: leader_of(replicas), 15, "a ready leader")
    propose_sync(leader, [submit("via-relay")])
    used = {pair for pair, relay in relays.items() if relay.accepted}
    # The node with the greater address dials: exactly one direction per pair.
    assert len(used) == 3
    by_id = {r.self_id: r.self_raft for r in replicas}
    assert all(by_id[a] > by_id[b] for a, b in used)


def test_a_cut_off_follower_reports_no_leader_and_an_isolated_leader_steps_down(relayed):
    replicas, relays = relayed
    leader = wait_until(lambda: leader_of(replicas), 15, "a ready leader")
    follower = next(r for r in replicas if r is not leader)
    isolate(follower.self_id, relays)
    wait_until(lambda: follower.leader_id() is None, 10, "the follower to see no leader")
    assert leader.is_ready_leader()            # the other two still form a majority
    propose_sync(leader, [submit("majority")])

    isolate(leader.self_id, relays)            # now the leader is alone too
    wait_until(lambda: not leader.is_ready_leader() and leader.leader_id() is None, 10,
               "the isolated leader to step down")
