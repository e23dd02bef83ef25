"""Pre-vote on pysyncobj's attributes, with a stand-in for the SyncObj."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from pysyncobj.monotonic import monotonic

from tsched.node.raft import prevote as pv


class FakeObj:
    def __init__(self, term=3, log_tail=(b"", 10, 3), state=0, peers=("b", "c")):
        self.raftCurrentTerm = term
        self.sent: list = []
        setattr(self, "_SyncObj__raftLog", [log_tail])
        setattr(self, "_SyncObj__raftState", state)
        setattr(self, "_SyncObj__otherNodes", [SimpleNamespace(id=p) for p in peers])
        setattr(self, "_SyncObj__raftElectionDeadline", monotonic() - 1)   # due now
        setattr(self, "_SyncObj__transferInProgress", False)
        setattr(self, "_SyncObj__generateRaftTimeout", lambda: 1.5)
        setattr(self, "_SyncObj__transport",
                SimpleNamespace(send=lambda node, msg: self.sent.append((node, msg))))

    def _SyncObj__setCurrentTerm(self, term, voted_for):
        self.raftCurrentTerm = term
        setattr(self, "_SyncObj__votedForNodeId", voted_for)

    def _SyncObj__setState(self, state):
        setattr(self, "_SyncObj__raftState", state)

    @property
    def deadline(self) -> float:
        return getattr(self, "_SyncObj__raftElectionDeadline")


def ask(term=4, index=10, log_term=3) -> dict:
    return {"type": pv.PRE_VOTE, "term": term, "last_log_index": index, "last_log_term": log_term}


@pytest.fixture
def quiet():
    """A PreVote whose last leader contact is long past."""
    p = pv.PreVote(min_timeout_s=1.0, may_vote=lambda: True)
    p._leader_heard_at = monotonic() - 10
    return p


def answer(p, obj, msg) -> bool:
    assert p.on_message(obj, "peer", msg)
    return obj.sent[-1][1]["granted"]


def test_a_due_election_becomes_a_pre_vote_round_and_a_majority_lets_it_campaign(quiet):
    obj = FakeObj()
    quiet.before_tick(obj)
    assert [m["type"] for _, m in obj.sent] == [pv.PRE_VOTE, pv.PRE_VOTE]
    assert obj.sent[0][1]["term"] == 4 and obj.raftCurrentTerm == 3    # no term change
    assert obj.deadline > monotonic()                                   # pysyncobj waits
    quiet.on_message(obj, SimpleNamespace(id="b"),
                     {"type": pv.PRE_VOTE_RESPONSE, "term": 4, "granted": True})
    assert obj.deadline == 0                          # 2 of 3: campaign on the next tick
    quiet.before_tick(obj)
    assert obj.deadline == 0 and len(obj.sent) == 2   # that tick campaigns, no new round


def test_grants_only_without_a_recent_leader_and_to_a_log_as_up_to_date(quiet):
    obj = FakeObj()
    assert answer(quiet, obj, ask()) is True
    assert answer(quiet, obj, ask(index=9)) is False          # behind this node's log
    assert answer(quiet, obj, ask(term=3)) is False           # not a higher term
    quiet.on_message(obj, "leader", {"type": "append_entries", "term": 3})
    assert answer(quiet, obj, ask()) is False                 # it hears from a leader
    leader = FakeObj(state=2)
    assert answer(pv.PreVote(min_timeout_s=0.0, may_vote=lambda: True), leader, ask()) is False
    rejoining = pv.PreVote(min_timeout_s=0.0, may_vote=lambda: False)
    assert answer(rejoining, FakeObj(), ask()) is False


def test_an_election_asked_for_by_the_leader_needs_no_pre_vote(quiet):
    obj = FakeObj()
    setattr(obj, "_SyncObj__transferInProgress", True)
    quiet.before_tick(obj)
    assert obj.sent == [] and obj.deadline < monotonic()


def test_two_nodes_that_refuse_each_other_agree_once_the_lower_term_is_caught_up():
    """The deadlock a long fault run found: n2 gone; n1 is in term 31 with the shorter log
    (it campaigned and lost), n3 in term 30 with the longer one. n1's pre-vote is refused
    for its log, n3's for its term: with no term carried back neither ever campaigned."""
    n1, n3 = FakeObj(term=31, log_tail=(b"", 100, 29)), FakeObj(term=30, log_tail=(b"", 120, 30))
    p1, p3 = (pv.PreVote(min_timeout_s=1.0, may_vote=lambda: True) for _ in range(2))
    for p in (p1, p3):
        p._leader_heard_at = monotonic() - 10
    p3.before_tick(n3)                                 # n3 asks for term 31
    request = n3.sent[-1][1]
    assert answer(p1, n1, request) is False            # refused: n1 is in term 31 already
    p3.on_message(n3, SimpleNamespace(id="n1"), n1.sent[-1][1])
    assert n3.raftCurrentTerm == 31 and n3.deadline > 0   # took n1's term; no campaign yet
    setattr(n3, "_SyncObj__raftElectionDeadline", monotonic() - 1)
    p3.before_tick(n3)                                 # next round: term 32
    assert answer(p1, n1, n3.sent[-1][1]) is True      # n3's longer log wins n1's grant
    p3.on_message(n3, SimpleNamespace(id="n1"), n1.sent[-1][1])
    assert n3.deadline == 0                            # 2 of 3: n3 campaigns


def test_an_answer_in_an_older_term_changes_nothing(quiet):
    obj = FakeObj(term=5)
    quiet.on_message(obj, SimpleNamespace(id="b"), {"type": pv.PRE_VOTE_RESPONSE, "term": 6,
                                                    "granted": False, "current_term": 4})
    assert obj.raftCurrentTerm == 5
