"""Pre-vote (Raft thesis 9.6): a node asks before it campaigns, so it never disturbs a leader.

pysyncobj starts an election as soon as a follower's election deadline passes, raising its
term; a leader that then hears of the higher term steps down. A follower that could not
keep up (catching up behind a large state, its Raft thread busy applying or restoring, a
paused process) did exactly that over and over: 21-23 elections while one node caught up.

`PreVote` runs on the Raft thread, from two hooks in raft.py:
- `before_tick`: when pysyncobj would start an election, the node first sends `pre_vote`
  (the term it would campaign in, its last log index and term) and pushes its deadline
  back; only once a majority (itself included) granted it does it let pysyncobj campaign.
  An election asked for by the leader (TimeoutNow, a leadership transfer) needs no pre-vote.
- `on_message`: a node grants a pre-vote only if it has not heard from a leader within the
  minimum election timeout (nor leads one itself), is not rejoining, and the asker's log is
  at least as up to date as its own. Granting changes nothing: no term, no vote.
- Every answer carries the answerer's own term, and an asker behind it takes that term (as
  any Raft message with a higher term does; etcd raft does the same). Without this, pre-vote
  can deadlock a live majority forever: of two nodes left, one with the higher term and the
  shorter log (it campaigned once and lost) refuses the other's pre-vote for its term, and
  the other refuses it for its log, so neither ever campaigns.
"""
from __future__ import annotations

import logging
from typing import Callable

from pysyncobj import SyncObj
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.node import Node

from tsched.node.raft.syncobj_adapter import (
    FOLLOWER, LEADER, election_deadline_s, forget_leader, new_election_timeout_s, other_nodes,
    raft_log, raft_state, send_message, set_current_term, set_election_deadline_s, set_state,
    transfer_in_progress)

log = logging.getLogger(__name__)

PRE_VOTE = "pre_vote"
PRE_VOTE_RESPONSE = "pre_vote_response"


def _log_position(obj: SyncObj) -> tuple[int, int]:
    last = raft_log(obj)[-1]
    return last[2], last[1]          # (term, index): compared as a tuple


class PreVote:
    def __init__(self, *, min_timeout_s: float, may_vote: Callable[[], bool]) -> None:
        self.min_timeout_s = min_timeout_s
        self._may_vote = may_vote
        self._leader_heard_at = monotonic_time()
        self._round_term: int | None = None     # the term a pre-vote round asks for
        self._granted: set[str] = set()
        self._won = False
        self.rounds = 0                          # pre-vote rounds started (tests, logs)

    # --- hooks -----------------------------------------------------------------------------

    def before_tick(self, obj: SyncObj) -> None:
        """Turn an election pysyncobj is about to start into a pre-vote round, unless one
        was just won (then let it campaign) or the leader asked for it (a transfer)."""
        if raft_state(obj) == LEADER or transfer_in_progress(obj):
            return
        if election_deadline_s(obj) >= monotonic_time():
            return
        if self._won:
            self._won = False                    # campaign now, in this tick
            return
        self._start_round(obj)

    def on_message(self, obj: SyncObj, node: Node, message: dict) -> bool:
        """Handle pre-vote messages (True: consumed) and note who leads."""
        kind = message.get("type")
        if kind == "append_entries" and message.get("term", 0) >= obj.raftCurrentTerm:
            self._leader_heard_at = monotonic_time()
            return False
        if kind == PRE_VOTE:
            send_message(obj, node, {"type": PRE_VOTE_RESPONSE, "term": message["term"],
                                     "granted": self._grants(obj, message),
                                     "current_term": obj.raftCurrentTerm})
            return True
        if kind == PRE_VOTE_RESPONSE:
            self._catch_up_term(obj, message.get("current_term", 0))
            self._count(obj, node, message)
            return True
        return False

    @staticmethod
    def _catch_up_term(obj: SyncObj, term: int) -> None:
        """A peer is in a later term: take it, as a follower with no vote and no leader
        (what pysyncobj does on a request_vote of a higher term)."""
        if not isinstance(term, int) or term <= obj.raftCurrentTerm:
            return
        set_current_term(obj, term, None)
        set_state(obj, FOLLOWER)
        forget_leader(obj)

    # --- a round -----------------------------------------------------------------------------

    def _start_round(self, obj: SyncObj) -> None:
        # Wait a whole new election timeout before trying again (or campaigning).
        set_election_deadline_s(obj, monotonic_time() + new_election_timeout_s(obj))
        self._round_term = obj.raftCurrentTerm + 1
        self._granted = set()
        self.rounds += 1
        term, index = _log_position(obj)
        for node in other_nodes(obj):
            send_message(obj, node, {"type": PRE_VOTE, "term": self._round_term,
                                     "last_log_index": index, "last_log_term": term})
        self._check_majority(obj)

    def _count(self, obj: SyncObj, node: Node, message: dict) -> None:
        if message.get("granted") and message.get("term") == self._round_term \
                and self._round_term == obj.raftCurrentTerm + 1:
            self._granted.add(node.id)
            self._check_majority(obj)

    def _check_majority(self, obj: SyncObj) -> None:
        voters = len(other_nodes(obj)) + 1
        if (len(self._granted) + 1) * 2 > voters:
            self._round_term = None
            self._won = True
            set_election_deadline_s(obj, 0)     # pysyncobj campaigns on the next tick

    def _grants(self, obj: SyncObj, message: dict) -> bool:
        if not self._may_vote() or message["term"] <= obj.raftCurrentTerm:
            return False
        if raft_state(obj) == LEADER:
            return False
        if monotonic_time() - self._leader_heard_at < self.min_timeout_s:
            return False
        return (message["last_log_term"], message["last_log_index"]) >= _log_position(obj)
