"""Workflows in the state machine (DESIGN.md section 5.2): submit (one entry, all or none),
the graph's refusals, idempotency, resolution, cancel, a step's result bound, retention,
and snapshots. The resolution rules against a reference: tests/property/test_sm_workflows.py.
"""
from __future__ import annotations

import pytest

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import commands as c
from tsched.statemachine.graphs import compact, deps_by_index
from tsched.statemachine.validate import Rejected

from sm_support import T0, Driver

RETRY = ["fixed", 1_000, 1_000, 1_000, 0]


def row(name, deps=(), rule="cancel"):
    return (name, f"t-{name}", f"job-{name}", "null", 5, 60_000, 0, RETRY, tuple(deps), rule)


def submit(d: Driver, rows, workflow_id="w1", **fields):
    return d.run(c.SubmitWorkflow, workflow_id=workflow_id, tenant="acme", **compact(rows),
                 **fields)


def finish(d: Driver, name: str, ok: bool = True, result: str = "null"):
    task = d.sm.tasks[f"t-{name}"]
    if task.state == "pending":
        d.ok(c.Claim, worker_id="w", task_types=(task.task_type,))
    if ok:
        return d.run(c.Complete, task_id=task.task_id, fencing_token=task.fencing_token,
                     result_json=result)
    return d.run(c.Fail, task_id=task.task_id, fencing_token=task.fencing_token,
                 retryable=False)


def states(d: Driver, workflow_id="w1"):
    return {s.name: s.state for s in d.sm.workflows.by_id[workflow_id].steps}


@pytest.mark.parametrize("rows, step, words", [
    ([row("a", (1,)), row("b", (0,))], "a", "cycle"),
    ([row("a"), row("b", (1,))], "b", "itself"),
    ([row("a"), row("a")], "a", "twice"),
    ([row("a", (7,))], "a", "not a step"),
    ([row("a"), row("b", (0, 0))], "b", "twice"),
])
def test_a_bad_graph_is_refused_naming_the_step_and_nothing_is_created(rows, step, words):
    d = Driver()
    result = submit(d, rows)
    assert result.code == "invalid_argument" and words in result.message
    assert result.details["step"] == step
    assert not d.sm.tasks and not d.sm.workflows.by_id and not d.sm.workflows.step_of


def test_the_node_check_names_unknown_deps_and_cycles_by_name():
    with pytest.raises(Rejected, match="unknown step 'z'"):
        deps_by_index(["a", "b"], [[], ["z"]])
    with pytest.raises(Rejected, match="is on a cycle") as e:
        deps_by_index(["a", "b", "c", "d"], [[], ["c", "a"], ["b"], ["c"]])
    assert e.value.details["step"] in ("b", "c")
    assert deps_by_index(["a", "b"], [[], ["a"]]) == [[], [0]]


def test_too_many_steps_is_refused_and_nothing_is_created():
    d = Driver(limits=Limits(workflow_steps_max=3))
    result = submit(d, [row(f"s{i}") for i in range(4)])
    assert result.code == "invalid_argument" and result.details["limit"] == 3
    assert not d.sm.tasks


def test_a_bad_field_is_refused_and_a_steps_own_field_names_the_step():
    d = Driver()
    bad = ("a", "t-a", "job", "null", 99, 60_000, 0, RETRY, (), "cancel")
    result = submit(d, [bad])
    assert result.code == "invalid_argument" and "priority" in result.message
    result = submit(d, [row("a", rule="maybe")])
    assert result.details["field"] == "on_parent_failure" and result.details["step"] == "a"
    result = submit(d, [("a", "t-a", "job", "x" * 70_000, 5, 60_000, 0, RETRY, (), "run")])
    assert result.code == "too_large" and result.details["step"] == "a"
    assert not d.sm.tasks


def test_steps_share_their_task_fields_in_the_command():
    rows = [row("a"), ("b", "t-b", "job-a", '{"i":1}', 5, 60_000, 0, RETRY, (0,), "run")]
    packed = compact(rows)
    assert len(packed["templates"]) == 1
    assert packed["steps"][1] == ("b", "t-b", 0, '{"i":1}', (0,), "run")
    d = Driver()
    assert submit(d, rows).ok
    assert d.sm.workflows.by_id["w1"].steps[1].template.payload_json == '{"i":1}'


def test_roots_start_at_once_and_a_child_in_the_apply_of_its_last_parent():
    d = Driver()
    assert submit(d, [row("a"), row("b"), row("c", (0, 1))]).ok
    assert states(d) == {"a": "pending", "b": "pending", "c": "waiting"}
    assert finish(d, "a").ok
    assert states(d)["c"] == "waiting"
    assert finish(d, "b").ok
    assert states(d)["c"] == "pending" and d.sm.tasks["t-c"].state == "pending"


def test_a_dead_letter_cancels_its_dependents_down_and_run_dependents_run():
    d = Driver()
    rows = [row("a"), row("b", (0,)), row("c", (1,)), row("r", (0,), "run")]
    assert submit(d, rows).ok
    assert finish(d, "a", ok=False).ok
    assert states(d) == {"a": "dead_letter", "b": "cancelled", "c": "cancelled",
                         "r": "pending"}
    wf = d.sm.workflows.by_id["w1"]
    assert wf.state == "running"   # r still to run


def test_replaying_the_dead_letter_resumes_the_steps_its_failure_cancelled():
    d = Driver()
    rows = [row("a"), row("b", (0,)), row("c", (1,)), row("x"), row("y", (3, 1))]
    assert submit(d, rows).ok
    assert finish(d, "x", ok=False).ok   # y has another failed parent: stays cancelled
    assert finish(d, "a", ok=False).ok
    assert states(d)["c"] == "cancelled"
    assert d.ok(c.Replay, task_id="t-a", actor="admin")
    change = d.sm.audit.entries[-1].change_json
    assert '"workflow":{"step":"a","workflow_id":"w1"}' in change
    assert states(d) == {"a": "pending", "b": "waiting", "c": "waiting", "x": "dead_letter",
                         "y": "cancelled"}
    assert finish(d, "a").ok and finish(d, "b").ok
    assert states(d)["c"] == "pending"


def test_a_finished_workflow_and_its_state():
    d = Driver()
    assert submit(d, [row("a"), row("b", (0,), "run")]).ok
    assert finish(d, "a", ok=False).ok
    assert finish(d, "b").ok
    wf = d.sm.workflows.by_id["w1"]
    assert wf.state == "failed" and wf.finished_at_ms == T0
    assert "acme" not in d.sm.workflows.open_by_tenant
    d.ok(c.Replay, task_id="t-a")   # a replay reopens it
    assert wf.state == "running" and d.sm.workflows.open_by_tenant["acme"] == 1


def test_an_idempotency_key_answers_the_first_workflow():
    d = Driver()
    first = submit(d, [row("a")], idempotency_key="k").value
    again = submit(d, [row("b")], workflow_id="w2", idempotency_key="k").value
    assert again["workflow"] is first["workflow"] and again["duplicate"] is True
    assert "t-b" not in d.sm.tasks


def test_a_used_task_id_is_a_conflict():
    d = Driver()
    d.add("t-a")
    result = submit(d, [row("a")])
    assert result.code == "conflict" and result.details["step"] == "a"


def test_cancel_cancels_waiting_and_pending_and_asks_running_to_stop():
    d = Driver()
    assert submit(d, [row("a"), row("b"), row("c", (0, 1))]).ok
    d.ok(c.Claim, worker_id="w", task_types=("job-a",))
    assert d.ok(c.CancelWorkflow, workflow_id="w1")
    running = next(t for t in d.sm.tasks.values() if t.state == "running")
    assert running.cancel_requested
    assert sorted(states(d).values()) == ["cancelled", "cancelled", "running"]
    assert d.ok(c.Fail, task_id=running.task_id, fencing_token=running.fencing_token)
    assert d.sm.workflows.by_id["w1"].state == "cancelled"
    assert d.run(c.CancelWorkflow, workflow_id="w1").code == "invalid_state"
    assert d.run(c.CancelWorkflow, workflow_id="w1", tenant="other").code == "not_found"


def test_a_steps_result_over_its_bound_is_refused_too_large():
    d = Driver(limits=Limits(step_result_bytes_max=10))
    assert submit(d, [row("a")]).ok
    result = finish(d, "a", result='"' + "x" * 20 + '"')
    assert result.code == "too_large" and result.details["limit"] == 10
    assert d.sm.tasks["t-a"].state == "running"
    assert finish(d, "a", result='"ok"').ok
    assert d.sm.workflows.by_id["w1"].steps[0].result_json == '"ok"'


def test_open_workflows_per_tenant_are_bounded():
    d = Driver(limits=Limits(workflows_open_per_tenant_max=1))
    assert submit(d, [row("a")]).ok
    assert submit(d, [row("b")], workflow_id="w2").code == "tenant_limit"
    assert finish(d, "a").ok
    assert submit(d, [row("b")], workflow_id="w2").ok


def test_kept_steps_evict_the_oldest_finished_workflow():
    d = Driver(limits=Limits(workflow_steps_kept_max=3))
    assert submit(d, [row("a"), row("b")]).ok
    assert submit(d, [row("c")], workflow_id="w2").ok
    assert submit(d, [row("d")], workflow_id="w3").code == "tenant_limit"   # none finished
    assert finish(d, "a").ok and finish(d, "b").ok
    assert submit(d, [row("d")], workflow_id="w3").ok
    assert list(d.sm.workflows.by_id) == ["w2", "w3"]
    assert "t-a" not in d.sm.workflows.step_of


def test_a_snapshot_carries_workflows_and_a_state_without_any_writes_none():
    d = Driver()
    d.add("plain")
    assert StateMachine.restore(d.sm.snapshot()).state_digest() == d.sm.state_digest()
    assert "workflows" not in d.sm._head()
    assert submit(d, [row("a"), row("b", (0,))]).ok
    assert finish(d, "a", result='{"n":1}').ok
    back = StateMachine.restore(d.sm.snapshot())
    assert back._head()["v"] == 8
    assert back.state_digest() == d.sm.state_digest()
    wf = back.workflows.by_id["w1"]
    assert [s.state for s in wf.steps] == ["completed", "pending"]
    assert wf.steps[0].result_json == '{"n":1}' and wf.steps[0].children == [1]
    assert back.workflows.step_of["t-b"] == (wf, 1)


def test_two_steps_with_one_task_id_is_a_conflict_and_nothing_is_created():
    d = Driver()
    twin = ("b", "t-a", "job-b", "null", 5, 60_000, 0, RETRY, (), "cancel")
    result = submit(d, [row("a"), twin])
    assert result.code == "conflict" and result.details["step"] == "b"
    assert not d.sm.tasks and not d.sm.workflows.by_id


def test_under_load_shedding_a_workflow_is_shed_as_its_least_urgent_step():
    d = Driver(limits=Limits(live_tasks_max=10, shed_above_permille=100))
    d.add("busy")                      # live 1 of 10: past the 10% shedding mark
    low = ("b", "t-b", "job-b", "null", 9, 60_000, 0, RETRY, (), "cancel")
    assert submit(d, [row("a"), low]).code == "overloaded"
    assert not d.sm.workflows.by_id and "t-a" not in d.sm.tasks
    assert submit(d, [row("a")]).ok    # priority 5: not shed


def test_a_steps_result_bound_counts_utf8_bytes_and_a_cancel_is_audited():
    d = Driver(limits=Limits(step_result_bytes_max=10))
    assert submit(d, [row("a"), row("b", (0,))]).ok
    assert finish(d, "a", result='"ééééé"').code == "too_large"   # 7 characters, 12 bytes
    assert d.ok(c.CancelWorkflow, workflow_id="w1", actor="admin")
    entry = d.sm.audit.entries[-1]
    assert entry.action == "workflow.cancel" and entry.target == "w1"
    assert '"cancel_requested":true' in entry.change_json
