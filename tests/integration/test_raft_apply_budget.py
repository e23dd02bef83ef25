"""A backlog of committed entries is applied a slice per tick (`node/apply_budget.py`).

Scenario: three replicas whose state machine takes 25 ms per entry; the leader is handed
80 batches at once, so all three hold about 2 s of applying (past the 0.4 s election
timeout these tests run with) as soon as the batches commit. Applied in one tick, the
replicas fell silent for that long and the cluster elected again. Applied a slice at a
time, every replica applies all 80 in order and the leader and its term stay the same.
"""
from __future__ import annotations

import dataclasses
import time

import pytest

from tests.integration.raft_support import (FAST, MiniMachine, cluster_spec, leader_of,
                                            make_replica, mini_kit, submit, wait_until)
from tsched.node.raft import MachineKit

pytestmark = pytest.mark.slow

APPLY_S = 0.025     # each entry's apply: a stand-in for an expensive state machine
BATCHES = 80


class SlowMachine(MiniMachine):
    def apply_batch(self, cmds):
        time.sleep(APPLY_S)
        return super().apply_batch(cmds)


def slow_kit() -> MachineKit:
    return dataclasses.replace(mini_kit(), new=SlowMachine, restore=SlowMachine.restore)


@pytest.fixture
def trio(tmp_path):
    replicas = [make_replica(s, FAST, kit=slow_kit()) for s in cluster_spec(tmp_path)]
    for r in replicas:
        r.start()
    yield replicas
    for r in replicas:
        r.stop()


def applied_order(replica) -> list[str]:
    order: list[str] = []
    replica.add_apply_listener(lambda seq, cmds, res: order.extend(
        c.request_id for c in cmds if c.request_id.startswith("x")))
    return order


def test_a_backlog_of_slow_entries_costs_no_election(trio):
    leader = wait_until(lambda: leader_of(trio), what="a leader")
    term = leader.term
    orders = [applied_order(r) for r in trio]
    rids = [f"x{i:03d}" for i in range(BATCHES)]
    for rid in rids:
        leader.propose_blob(leader.encode_batch([submit(rid)]))
    wait_until(lambda: all(o[-1:] == rids[-1:] for o in orders), timeout_s=30,
               what="every batch applied on every replica")

    assert orders == [rids] * 3, "each replica applies each batch once, in order"
    assert leader_of(trio) is leader and leader.term == term, "no election happened"
    assert all(r._obj.slices_cut > 0 for r in trio), "each replica cut its apply into slices"
