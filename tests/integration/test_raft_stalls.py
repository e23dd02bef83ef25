"""A replica held up does not cost the cluster an election.

A backlog of committed entries is applied a slice per tick (`node/raft/apply_budget.py`).
Scenario: three replicas whose state machine takes 25 ms per entry; the leader is handed
80 batches at once, so all three hold about 2 s of applying (past the 0.4 s election
timeout these tests run with) as soon as the batches commit. Applied in one tick, the
replicas fell silent for that long and the cluster elected again. Applied a slice at a
time, every replica applies all 80 in order and the leader and its term stay the same.

A leader whose own Raft thread was held does not step down for the answers it did not
get meanwhile (`node/raft/stall_clock.py`). Scenario: the leader's thread is held 1 s, longer
than its 0.4 s leader-fallback timeout and shorter than the followers' 2 s election
timeout; it stays leader in the same term.
"""
from __future__ import annotations

import dataclasses
import time

import pytest

from tests.harness.raft_options import FAST
from tests.harness.waits import wait_until
from tests.integration.raft_support import (MiniMachine, cluster_spec, leader_of, make_replica,
                                            mini_kit, submit)
from tsched.node.raft.machine_kit import MachineKit

pytestmark = pytest.mark.slow

APPLY_S = 0.025     # each entry's apply: a stand-in for an expensive state machine
BATCHES = 80


class SlowMachine(MiniMachine):
    def apply_batch(self, cmds):
        time.sleep(APPLY_S)
        return super().apply_batch(cmds)


def slow_kit() -> MachineKit:
    return dataclasses.replace(mini_kit(), new=SlowMachine, restore=SlowMachine.restore)


def started(replicas):
    for r in replicas:
        r.start()
    return replicas


@pytest.fixture
def trio(tmp_path):
    replicas = started([make_replica(s, FAST, kit=slow_kit()) for s in cluster_spec(tmp_path)])
    yield replicas
    for r in replicas:
        r.stop()


PATIENT = dataclasses.replace(FAST, raft_min_timeout_s=2.0, raft_max_timeout_s=3.0)
HOLD_S = 1.0        # > PATIENT.leader_fallback_timeout_s (0.4), < its election timeout


@pytest.fixture
def patient_trio(tmp_path):
    replicas = started([make_replica(s, PATIENT) for s in cluster_spec(tmp_path)])
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


def test_a_leader_held_up_does_not_step_down(patient_trio):
    leader = wait_until(lambda: leader_of(patient_trio), what="a leader")
    term = leader.term
    held = []

    def hold_once(seq, cmds, res):
        if any(c.request_id == "hold" for c in cmds) and not held:
            held.append(True)
            time.sleep(HOLD_S)          # the leader's Raft thread, and it alone, is held

    leader.add_apply_listener(hold_once)
    leader.propose_blob(leader.encode_batch([submit("hold")]))
    wait_until(lambda: held, what="the leader held")
    followers = [r for r in patient_trio if r is not leader]
    orders = [applied_order(r) for r in followers]
    leader.propose_blob(leader.encode_batch([submit("xafter")]))
    wait_until(lambda: all(o == ["xafter"] for o in orders), timeout_s=10,
               what="an entry proposed after the hold applied by the followers")

    assert leader_of(patient_trio) is leader and leader.term == term, "no step-down, no election"
    assert leader._obj.stall_forgiven_s >= HOLD_S / 2
