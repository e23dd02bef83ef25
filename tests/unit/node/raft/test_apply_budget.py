"""BoundedApply: committed entries applied a slice per tick, in order, each once."""
from __future__ import annotations

from pysyncobj.syncobj import FAIL_REASON

from tsched.node.raft.apply_budget import BoundedApply


class FakeRaft(BoundedApply):
    """What BoundedApply reads of pysyncobj: a log of (command, idx, term), a commit index,
    and an apply that costs `cost_s[command]` of a fake clock."""

    def __init__(self, commands: list[str], cost_s: dict[str, float], budget_s: float) -> None:
        self.apply_budget_s = budget_s
        self.now = 0.0
        self.clock = lambda: self.now
        self.cost_s = cost_s
        self.applied: list[str] = []
        self.answers: list = []
        self.log = [(cmd, i + 1, 1) for i, cmd in enumerate(commands)]
        self._SyncObj__raftCommitIndex = len(commands)
        self._SyncObj__raftLastApplied = 0
        self._SyncObj__commandsWaitingCommit = {1: [(1, self._answer)], 2: [(0, self._answer)]}
        self._SyncObj__conf = type("Conf", (), {"appendEntriesUseBatch": True})()

    def _answer(self, res, reason) -> None:
        self.answers.append((res, reason))

    def _SyncObj__getEntries(self, from_idx: int, count: int):
        return self.log[from_idx - 1:from_idx - 1 + count]

    def _SyncObj__doApplyCommand(self, cmd: str) -> str:
        self.now += self.cost_s.get(cmd, 0.0)
        self.applied.append(cmd)
        return cmd.upper()


def ticks_until_applied(raft: FakeRaft) -> list[list[str]]:
    slices = []
    while raft._unapplied():
        before = len(raft.applied)
        raft._SyncObj__applyLogEntries()
        slices.append(raft.applied[before:])
    return slices


def test_a_backlog_is_applied_in_slices_in_order_each_once():
    cmds = [f"c{i}" for i in range(10)]
    raft = FakeRaft(cmds, {c: 0.02 for c in cmds}, budget_s=0.05)
    slices = ticks_until_applied(raft)
    assert [c for s in slices for c in s] == cmds
    assert [len(s) for s in slices] == [3, 3, 3, 1]     # 60 ms > 50 ms: the slice ends
    assert raft.slices_cut == 3 and raft._SyncObj__raftLastApplied == 10
    assert not raft.cut, "nothing left: the next tick may wait"


def test_an_entry_longer_than_the_budget_is_applied_alone():
    raft = FakeRaft(["slow", "a", "b"], {"slow": 1.0}, budget_s=0.05)
    assert ticks_until_applied(raft) == [["slow"], ["a", "b"]]


def test_the_proposers_are_answered_by_term():
    raft = FakeRaft(["a", "b"], {}, budget_s=0.05)
    ticks_until_applied(raft)
    assert raft.answers == [("A", FAIL_REASON.SUCCESS), (None, FAIL_REASON.DISCARDED)]


def test_entries_missing_from_the_log_are_not_waited_for():
    raft = FakeRaft(["a"], {}, budget_s=0.05)
    raft._SyncObj__raftCommitIndex = 3     # committed past the log's end
    raft._SyncObj__applyLogEntries()
    assert raft.applied == ["a"] and not raft.cut


def test_nothing_committed_nothing_applied():
    raft = FakeRaft(["a"], {}, budget_s=0.05)
    raft._SyncObj__raftCommitIndex = 0
    assert raft._SyncObj__applyLogEntries() is False and raft.applied == []
