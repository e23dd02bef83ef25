"""Workflow resolution against a brute-force reference (DESIGN.md section 5.2).

Hypothesis draws a random graph (deps point at earlier steps, so it is acyclic; each step
"cancel" or "run") and a random sequence of task actions on its steps: claim, complete,
fail for good, cancel, replay. The task lifecycle is the real one (its own tests cover it);
the reference re-derives, from scratch after every action and by a plain scan in
topological order, what each step without a task must be:

- "cancel": cancelled when some parent failed (dead-lettered, cancelled, discarded, or
  itself cancelled without a task); runnable when every parent completed; else waiting;
- "run": runnable when every parent completed or failed; else waiting;

and a runnable step gets its task in that same apply. The machine must agree on every
step after every action: which steps have tasks (a step becomes runnable exactly when its
rule says), the state of the others, the workflow's state, and no step's task is ever
created twice. A snapshot round trip keeps it all.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c
from tsched.statemachine.graphs import compact
from tests.property.budget import examples

T0 = 1_700_000_000_000
RETRY = ["fixed", 1_000, 1_000, 1_000, 0]
FAILED = ("cancelled", "dead_letter", "discarded")
ACTIONS = ("claim", "complete", "fail", "cancel", "replay", "discard")


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 6))
    steps = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=min(i, 4))) \
            if i else []
        steps.append((deps, draw(st.sampled_from(("cancel", "run")))))
    return steps


class Run:
    def __init__(self, graph):
        self.sm, self.n, self.graph = StateMachine(), 0, graph
        rows = tuple((f"s{i}", f"t{i}", f"type{i}", "null", 5, 60_000, 0, RETRY,
                      tuple(deps), rule) for i, (deps, rule) in enumerate(graph))
        assert self.apply(c.SubmitWorkflow, workflow_id="w", tenant="a", **compact(rows)).ok
        self.wf = self.sm.workflows.by_id["w"]
        self.seqs: dict[str, int] = {}   # task id -> its seq, the first time it was seen
        self.started: set[int] = set()   # steps the reference made runnable, in its turn

    def apply(self, cls, **fields):
        self.n += 1
        return self.sm.apply(cls(request_id=f"r{self.n}", now_ms=T0 + self.n, **fields))

    def act(self, action: str, pick: int) -> None:
        """`action` on one of the steps that have a task (`pick` modulo their count), so
        that every drawn action acts on something."""
        have = [i for i in range(len(self.graph)) if f"t{i}" in self.sm.tasks]
        i = have[pick % len(have)]
        task = self.sm.tasks[f"t{i}"]
        if action == "claim" or (action in ("complete", "fail") and task.state == "pending"):
            self.apply(c.Claim, worker_id="w", task_types=(f"type{i}",))
        token = task.fencing_token
        if action == "complete":
            self.apply(c.Complete, task_id=task.task_id, fencing_token=token,
                       result_json=f'{{"step":{i}}}')
        elif action == "fail":
            self.apply(c.Fail, task_id=task.task_id, fencing_token=token, retryable=False)
        elif action == "cancel":
            self.apply(c.Cancel, task_id=task.task_id)
        elif action == "replay":
            self.apply(c.Replay, task_id=task.task_id)
        elif action == "discard":
            self.apply(c.Discard, task_id=task.task_id)

    def expected(self) -> list[str]:
        """Each step's state by the rules (a scan, in order): a step the reference started
        has its task's state; any other is derived from its parents, and one found
        runnable is started now (its task was due in this very apply: pending)."""
        out: list[str] = []
        for i, (deps, rule) in enumerate(self.graph):
            if i in self.started:
                task = self.sm.tasks.get(f"t{i}")
                out.append("missing" if task is None else task.state)
                continue
            parents = [out[d] for d in deps]
            failed = any(p in FAILED for p in parents)
            if rule == "cancel" and failed:
                out.append("cancelled")
            elif all(p == "completed" or (rule == "run" and p in FAILED) for p in parents):
                self.started.add(i)
                out.append("pending")
            else:
                out.append("waiting")
        return out

    def check(self) -> None:
        expected = self.expected()
        assert [s.state for s in self.wf.steps] == expected
        for i in range(len(self.graph)):
            task = self.sm.tasks.get(f"t{i}")
            assert (task is not None) == (i in self.started), (i, expected)
            if task is not None:   # created once: the seq it was first seen with, for ever
                assert self.seqs.setdefault(task.task_id, task.seq) == task.seq
        open_steps = any(s in ("waiting", "pending", "running") for s in expected)
        want = "running" if open_steps else (
            "completed" if all(s == "completed" for s in expected) else "failed")
        assert self.wf.state == want
        assert sum(self.wf.counts.values()) == len(self.graph)


@settings(max_examples=examples(300), deadline=None)
@given(graphs(), st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 5)),
                          min_size=5, max_size=50))
def test_steps_become_runnable_exactly_by_their_rule_and_once(graph, actions):
    run = Run(graph)
    run.check()
    for action, i in actions:
        run.act(action, i)
        run.check()
    restored = StateMachine.restore(run.sm.snapshot())
    assert restored.state_digest() == run.sm.state_digest()
    back = restored.workflows.by_id["w"]
    assert [(s.state, s.unfinished, s.failed, s.children) for s in back.steps] == \
        [(s.state, s.unfinished, s.failed, s.children) for s in run.wf.steps]
    assert back.counts == run.wf.counts


@settings(max_examples=examples(100), deadline=None)
@given(graphs(), st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 8)),
                          max_size=20))
def test_a_cancelled_workflow_starts_nothing_more(graph, actions):
    run = Run(graph)
    for action, i in actions[:len(actions) // 2]:
        run.act(action, i)
    had = set(run.sm.tasks)
    result = run.apply(c.CancelWorkflow, workflow_id="w")
    assert result.ok == (run.wf.state in ("running", "cancelled")) or not result.ok
    for action, i in actions[len(actions) // 2:]:
        run.act(action, i)
    if result.ok:
        assert set(run.sm.tasks) == had   # no step started after the cancel
        assert all(s.state != "waiting" for s in run.wf.steps)
