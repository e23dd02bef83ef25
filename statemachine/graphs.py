"""Workflows' records and their graph check (DESIGN.md section 5.2).

A workflow is a graph of steps submitted in one command (`SubmitWorkflow`). A step is a
task template with the names of its parents (`deps`, kept as indexes into the workflow's
steps) and what a failed parent does to it (`on_parent_failure`). A step has no task while
it waits for its parents; the apply that finishes its last parent creates its task (with
the id the proposer chose for it), and from then on the step's state follows its task's.

This module is pure and imports no other handler: the node checks a submitted graph with
`check_graph` before proposing it, and the state machine checks it again at apply.
"""
from __future__ import annotations

from collections.abc import Sequence

from .commands import TaskTemplate
from .errors import INVALID_ARGUMENT
from .model import CANCELLED, COMPLETED, DEAD_LETTER, DISCARDED, PENDING, RUNNING
from .validate import Rejected

# A step's states: `waiting` (no task yet), then its task's states. A step cancelled while
# waiting (a failed parent, or the workflow cancelled) is `cancelled` without a task.
WAITING = "waiting"
STEP_STATES = (WAITING, PENDING, RUNNING, COMPLETED, CANCELLED, DEAD_LETTER, DISCARDED)
FAILED = (CANCELLED, DEAD_LETTER, DISCARDED)       # a parent in one of these has failed
FINAL = (COMPLETED, CANCELLED, DEAD_LETTER, DISCARDED)
# What a failed parent does to a step: cancel it (and, through it, its dependents), or
# run it anyway once every parent has finished, one way or the other.
ON_FAILURE_CANCEL, ON_FAILURE_RUN = "cancel", "run"
ON_PARENT_FAILURE = (ON_FAILURE_CANCEL, ON_FAILURE_RUN)
# Why a step without a task was cancelled: a failed parent (undone when that parent is
# replayed, section 5.2) or the workflow's cancel (for good).
BY_PARENT, BY_WORKFLOW = "parent", "workflow"

# A workflow's states: running while a step is not final; then completed (every step
# completed), failed (some step did not) or cancelled (its cancel was asked).
WF_RUNNING, WF_COMPLETED, WF_FAILED, WF_CANCELLED = "running", "completed", "failed", \
    "cancelled"
WORKFLOW_STATES = (WF_RUNNING, WF_COMPLETED, WF_FAILED, WF_CANCELLED)


class Step:
    """One step. `unfinished`: parents not yet finished for this step's rule (not completed;
    for `run`, not completed nor failed); `failed`: parents now in a failed state. Both
    are kept by the apply that changes a parent, so resolving a step costs O(children)."""

    __slots__ = ("name", "task_id", "template", "deps", "children", "on_parent_failure",
                 "state", "unfinished", "failed", "cause", "result_json", "error",
                 "traceparent")

    def __init__(self, name: str, task_id: str, template: TaskTemplate, deps: tuple[int, ...],
                 on_parent_failure: str) -> None:
        self.name = name
        self.task_id = task_id
        self.template = template
        self.deps = deps
        self.children: list[int] = []          # derived from every step's deps
        self.on_parent_failure = on_parent_failure
        self.state = WAITING
        self.unfinished = len(deps)
        self.failed = 0
        self.cause: str | None = None          # BY_PARENT or BY_WORKFLOW, when cancelled so
        self.result_json: str | None = None    # kept from the task: it may be evicted first
        self.error: str | None = None
        self.traceparent: str | None = None    # its own trace context (else the workflow's)

    def __repr__(self) -> str:
        return f"Step({self.name!r}, {self.state}, unfinished={self.unfinished})"


class Workflow:
    """A workflow: its steps in the order submitted, and counts of them by state."""

    __slots__ = ("workflow_id", "tenant", "seq", "steps", "counts", "state",
                 "cancelled", "idempotency_key", "created_at_ms", "finished_at_ms",
                 "finish_seq", "traceparent")

    def __init__(self, workflow_id: str, tenant: str, seq: int, steps: list[Step],
                 idempotency_key: str | None, created_at_ms: int) -> None:
        self.workflow_id = workflow_id
        self.tenant = tenant
        self.seq = seq
        self.steps = steps
        self.counts = {state: 0 for state in STEP_STATES}
        self.state = WF_RUNNING
        self.cancelled = False
        self.idempotency_key = idempotency_key
        self.created_at_ms = created_at_ms
        self.finished_at_ms: int | None = None
        self.finish_seq = 0                    # order of finishing: oldest evicted first
        self.traceparent: str | None = None    # the submitter's, given to every step's task

    @property
    def open_steps(self) -> int:
        c = self.counts
        return c[WAITING] + c[PENDING] + c[RUNNING]

    def link(self) -> None:
        """Every step's children and the counts, from the steps (a submit, a restore)."""
        for state in STEP_STATES:
            self.counts[state] = 0
        for i, step in enumerate(self.steps):
            self.counts[step.state] += 1
            for d in step.deps:
                self.steps[d].children.append(i)

    def __repr__(self) -> str:
        return f"Workflow({self.workflow_id!r}, {self.tenant!r}, {self.state})"


# --- the graph check ------------------------------------------------------------------------

def deps_by_index(names: Sequence[str], deps: Sequence[Sequence[str]]) -> list[list[int]]:
    """Names of parents -> indexes: a duplicate step name, an unknown or repeated dep, or a
    step its own dep is `invalid_argument` naming the step."""
    index: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in index:
            raise _bad(name, f"step name {name!r} appears twice")
        index[name] = i
    out: list[list[int]] = []
    for name, parents in zip(names, deps):
        row = []
        for parent in parents:
            j = index.get(parent)
            if j is None:
                raise _bad(name, f"step {name!r} depends on unknown step {parent!r}")
            row.append(j)
        check_deps(name, row, len(names), index[name])
        out.append(row)
    check_acyclic(names, out)
    return out


def check_deps(name: str, deps: Sequence[object], n: int, me: int) -> None:
    """One step's parent indexes: in range, not itself, none twice."""
    seen: dict[object, bool] = {}
    for j in deps:
        if type(j) is not int or not 0 <= j < n:
            raise _bad(name, f"step {name!r} has a dep that is not a step")
        if j == me:
            raise _bad(name, f"step {name!r} depends on itself")
        if j in seen:
            raise _bad(name, f"step {name!r} names a dep twice")
        seen[j] = True


def check_acyclic(names: Sequence[str], deps: Sequence[Sequence[int]]) -> None:
    """Kahn's order over the graph; a step left over lies on or below a cycle: walking up
    from it through parents that are also left over must repeat a step, which lies on the
    cycle, and the rejection names it."""
    n = len(deps)
    waiting = [len(d) for d in deps]
    children: list[list[int]] = [[] for _ in range(n)]
    for i, parents in enumerate(deps):
        for j in parents:
            children[j].append(i)
    ready = [i for i in range(n) if waiting[i] == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for k in children[i]:
            waiting[k] -= 1
            if waiting[k] == 0:
                ready.append(k)
    if done == n:
        return
    at = next(i for i in range(n) if waiting[i] > 0)
    seen: dict[int, bool] = {}
    while at not in seen:
        seen[at] = True
        at = next(j for j in deps[at] if waiting[j] > 0)
    raise _bad(names[at], f"step {names[at]!r} is on a cycle of deps")


def _bad(step: str, message: str) -> Rejected:
    return Rejected(INVALID_ARGUMENT, message, field="steps", step=step)


# --- a submit's rows -------------------------------------------------------------------------

def compact(rows: Sequence[Sequence]) -> dict[str, tuple]:
    """Whole step rows (name, task_id, task_type, payload_json, priority, timeout_ms,
    max_retries, retry record, deps, on_parent_failure[, traceparent]) -> SubmitWorkflow's
    `templates` and `steps` (commands.py): equal task fields are written once; a step's own
    trace context ends its row, only when it has one."""
    index: dict[tuple, int] = {}
    steps = []
    for row in rows:
        name, task_id, task_type, payload, priority, timeout_ms, retries, retry, deps, rule \
            = row[:10]
        key = (task_type, priority, timeout_ms, retries, tuple(retry))
        at = index.setdefault(key, len(index))
        step: tuple = (name, task_id, at, payload, tuple(deps), rule)
        if len(row) > 10 and row[10] is not None:
            step += (row[10],)
        steps.append(step)
    return {"templates": tuple(index), "steps": tuple(steps)}


# --- records (snapshots) ----------------------------------------------------------------------

def step_record(s: Step) -> list:
    t = s.template
    return [s.name, s.task_id, t.task_type, t.payload_json, t.priority, t.timeout_ms,
            t.max_retries, [t.retry.backoff, t.retry.base_ms, t.retry.max_ms,
                            t.retry.multiplier_milli, t.retry.jitter_permille],
            list(s.deps), s.on_parent_failure, s.state, s.unfinished, s.failed, s.cause,
            s.result_json, s.error] + ([] if s.traceparent is None else [s.traceparent])


def workflow_record(w: Workflow) -> list:
    """The trace context is appended only when the workflow has one (the record and the
    digest of one without are unchanged)."""
    record = [w.workflow_id, w.tenant, w.seq, w.state, w.cancelled, w.idempotency_key,
              w.created_at_ms, w.finished_at_ms, w.finish_seq,
              [step_record(s) for s in w.steps]]
    if w.traceparent is not None:
        record.append(w.traceparent)
    return record
