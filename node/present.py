"""State machine objects -> API JSON (DESIGN.md sections 5 and 7).

Times are RFC 3339 UTC with milliseconds and `Z`; durations are seconds; payloads and
results are JSON values. Called under the replica lock, straight after apply or during a
read, because the objects are live. An answer is a `Json` object: its values are what
orjson serialises (str, numbers, None, lists, dicts, `orjson.Fragment`).
"""
from __future__ import annotations

import datetime as _dt

import orjson

from tsched.statemachine import commands as c
from tsched.statemachine.audit import AuditEntry
from tsched.statemachine.errors import Result
from tsched.statemachine.graphs import Step, Workflow
from tsched.statemachine.model import RETRYING, Attempt, Schedule, Task, TenantView
from tsched.statemachine.pauses import Pause, Pauses
from tsched.statemachine.ratelimits import OVERFLOW, LimitDef, Limiter
from tsched.statemachine.reads import status

from tsched.node.errors import ApiError, from_result

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
Json = dict[str, object]   # one JSON object of an answer


_SECONDS_CACHED_MAX = 4096
_second_prefix: dict[int, str] = {}   # epoch second -> "YYYY-MM-DDTHH:MM:SS" (a pure cache)
_INSTANTS_CACHED_MAX = 8192
_instant: dict[int, str] = {}         # epoch ms -> its RFC 3339 text (a pure cache)


def rfc3339(ms: int | None) -> str | None:
    """Epoch ms -> "2026-12-01T15:00:00.000Z". Rendering is on the hot path of every
    answer, and instants repeat: the tasks of one batch share their creation, claim or
    completion instant, so whole texts are cached by ms, and prefixes by second."""
    if ms is None:
        return None
    text = _instant.get(ms)
    if text is None:
        if len(_instant) >= _INSTANTS_CACHED_MAX:
            _instant.clear()
        text = _instant[ms] = _format_ms(ms)
    return text


def _format_ms(ms: int) -> str:
    sec, milli = divmod(ms, 1000)
    prefix = _second_prefix.get(sec)
    if prefix is None:
        if len(_second_prefix) >= _SECONDS_CACHED_MAX:
            _second_prefix.clear()
        t = _EPOCH + _dt.timedelta(seconds=sec)
        prefix = _second_prefix[sec] = t.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{prefix}.{milli:03d}Z"


def seconds(ms: int | None) -> int | float | None:
    """ms -> seconds, as an int when whole (30 rather than 30.0)."""
    if ms is None:
        return None
    return ms // 1000 if ms % 1000 == 0 else ms / 1000


def json_fragment(text: str | None) -> orjson.Fragment | None:
    """A stored JSON text (payload, result) as it goes out, unparsed: the node stores them
    compact with sorted keys (validate.json_text), which is what parsing and serialising
    them again would give. Only orjson serialises the answers."""
    return None if text is None else orjson.Fragment(text)


_RETRIES_CACHED_MAX = 1024
_retry: dict[int, tuple[c.RetryPolicy, Json]] = {}   # id(policy) -> (policy, rendered)


def retry(policy: c.RetryPolicy) -> Json:
    """A retry policy as the API shows it. Tasks share their policy objects (the state
    machine decodes one per distinct policy), so renderings are cached by identity; the
    cache holds the policy, so an id is not reused while cached."""
    hit = _retry.get(id(policy))
    if hit is None or hit[0] is not policy:
        if len(_retry) >= _RETRIES_CACHED_MAX:
            _retry.clear()
        hit = _retry[id(policy)] = (policy, _retry_fields(policy))
    return dict(hit[1])


def _retry_fields(policy: c.RetryPolicy) -> Json:
    return {
        "backoff": policy.backoff,
        "base_s": seconds(policy.base_ms),
        "max_s": seconds(policy.max_ms),
        "multiplier": policy.multiplier_milli / 1000,
        "jitter": policy.jitter_permille / 1000,
    }


_DETAIL_KEYS = ("type", "message", "traceback")


def error_detail(text: str | None) -> dict[str, str] | None:
    """A stored error's detail `{type, message, traceback}` (DESIGN 14.1), or None for a
    plain string: the node stores a detailed error as the compact JSON of exactly these
    keys, in this order (validate.error_text)."""
    if not text or not text.startswith('{"type":'):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict) or tuple(value) != _DETAIL_KEYS:
        return None
    return value


def error_line(text: str | None) -> str | None:
    """A stored error as one readable string: "Type: message" for a detailed one."""
    if text is None:
        return None
    detail = error_detail(text)
    if detail is None:
        return text
    return f"{detail['type']}: {detail['message']}" if detail["message"] else detail["type"]


def attempt(a: Attempt) -> Json:
    return {
        "attempt": a.attempt,
        "worker_id": a.worker_id,
        "fencing_token": a.fencing_token,
        "started_at": rfc3339(a.started_at_ms),
        "ended_at": rfc3339(a.ended_at_ms),
        "outcome": a.outcome,
        "error": error_line(a.error),
        "error_detail": error_detail(a.error),
    }


# A task answer's fields, in the contract's order. Each answer starts as a copy of this
# (one presized table) and has its values set: a dict display this long is built key by key
# with several resizes, about a sixth of rendering a task.
_TASK_FIELDS: Json = dict.fromkeys((
    "task_id", "tenant", "task_type", "state", "status", "next_retry_at", "payload", "priority",
    "run_at", "attempt", "max_retries", "retry", "timeout_s", "idempotency_key", "execution_id",
    "schedule_id", "lease_expires_at", "fencing_token", "worker_id", "cancel_requested",
    "last_error", "result", "created_at", "started_at", "completed_at", "attempts",
    "limits", "traceparent"))


def task(t: Task, *, duplicate: bool | None = None) -> Json:
    out = _TASK_FIELDS.copy()
    out["task_id"] = t.task_id
    out["tenant"] = t.tenant
    out["task_type"] = t.task_type
    out["state"] = t.state
    out["status"] = shown = status(t)
    if shown == RETRYING:
        out["next_retry_at"] = rfc3339(t.run_at_ms)
    out["payload"] = json_fragment(t.payload_json)
    out["priority"] = t.priority
    out["run_at"] = rfc3339(t.run_at_ms)
    out["attempt"] = t.attempt
    out["max_retries"] = t.max_retries
    out["retry"] = retry(t.retry)
    out["timeout_s"] = seconds(t.timeout_ms)
    out["idempotency_key"] = t.idempotency_key
    out["execution_id"] = t.execution_id
    out["schedule_id"] = t.schedule_id
    out["lease_expires_at"] = rfc3339(t.lease_expires_at_ms)
    out["fencing_token"] = t.fencing_token
    out["worker_id"] = t.worker_id
    out["cancel_requested"] = bool(t.cancel_requested)
    out["last_error"] = error_line(t.last_error)
    out["result"] = json_fragment(t.result_json)
    out["created_at"] = rfc3339(t.created_at_ms)
    out["started_at"] = rfc3339(t.started_at_ms)
    out["completed_at"] = rfc3339(t.completed_at_ms)
    out["attempts"] = [attempt(a) for a in t.attempts]
    out["limits"] = list(t.limits) if t.limits else []
    out["traceparent"] = t.traceparent
    if duplicate is not None:
        out["duplicate"] = duplicate
    return out


def limited_by(limiter: Limiter, t: Task, now_ms: int) -> Json | None:
    """Why a pending task waits on a keyed limit: the limit, its partition, and the
    earliest time it can run (None: when a running task of that partition ends)."""
    why = limiter.limited_by(t, now_ms)
    if why is None:
        return None
    name, key, until_ms = why
    return {"limit": name, "partition": None if key == OVERFLOW else key,
            "until": rfc3339(until_ms)}


def pause(p: Pause) -> Json:
    """A standing pause (issue 48): its selector (null: any), since when, who and why."""
    return {"task_type": p.task_type, "tenant": p.tenant, "paused_at": rfc3339(p.paused_at_ms),
            "actor": p.actor, "reason": p.reason}


def paused(pauses: Pauses, t: Task) -> Json | None:
    """Why a pending task is not claimed: the pause that covers it (null: none does)."""
    if t.state != "pending":
        return None
    p = pauses.of_task(t)
    return None if p is None else pause(p)


def pause_change(v: dict) -> Json:
    """A pause's or resume's answer: the pause, whether the command changed it, and for a
    resume when it was lifted."""
    out = pause(v["pause"])
    out["changed"] = bool(v["changed"])
    if v.get("resumed_at_ms") is not None:
        out["resumed_at"] = rfc3339(v["resumed_at_ms"])
    return out


def progress(reported: tuple[int, str, int] | None) -> Json | None:
    """A running task's last reported progress (store.progress, DESIGN 9): the fraction
    (kept in thousandths), the message and when it came; None when there is none."""
    if reported is None:
        return None
    permille, message, at_ms = reported
    return {"fraction": permille / 1000, "message": message, "at": rfc3339(at_ms)}


def limit(d: LimitDef) -> Json:
    return {"name": d.name, "rate": d.rate or None,
            "per_s": seconds(d.per_ms) if d.rate else None,
            "concurrency": d.concurrency or None, "partition_by": d.partition_by,
            "created_at": rfc3339(d.created_at_ms), "updated_at": rfc3339(d.updated_at_ms)}


def limit_usage(limiter: Limiter, name: str, now_ms: int, shown: int) -> Json:
    """A limit with its use now: running slots taken, claims in the current window, held
    tasks, and its `shown` busiest partitions."""
    in_use, held, rows = limiter.usage(name, now_ms)
    out = limit(limiter.defs[name])
    out["in_use"] = in_use
    out["in_window"] = sum(r[2] for r in rows)
    out["held"] = held
    out["partition_count"] = len(rows)
    out["partitions"] = [{"partition": k, "running": run, "in_window": win, "held": h}
                         for k, run, win, h in rows[:shown]]
    return out


def tenant(v: TenantView) -> Json:
    return {"tenant": v.tenant, "max_running": v.max_running, "weight": v.weight,
            "running": v.running, "pending": v.pending}


def template(t: c.TaskTemplate) -> Json:
    return {"task_type": t.task_type, "payload": json_fragment(t.payload_json),
            "priority": t.priority, "timeout_s": seconds(t.timeout_ms),
            "max_retries": t.max_retries, "retry": retry(t.retry)}


def schedule(s: Schedule) -> Json:
    return {
        "schedule_id": s.schedule_id,
        "tenant": s.tenant,
        "cron": s.cron,
        "timezone": s.timezone,
        "task": template(s.template),
        "overlap": s.overlap,
        "misfire": s.misfire,
        "catchup_window_s": seconds(s.catchup_window_ms),
        "paused": bool(s.paused),
        "start_at": rfc3339(s.start_at_ms),
        "end_at": rfc3339(s.end_at_ms),
        "jitter_s": seconds(s.jitter_ms),
        "next_fire_at": rfc3339(s.next_fire_ms),
        "fires": [{"fire_at": rfc3339(f.fire_ms), "outcome": f.outcome, "task_id": f.task_id}
                  for f in s.fires],
        "created_at": rfc3339(s.created_at_ms),
        "updated_at": rfc3339(s.updated_at_ms),
    }


def result(cmd: c.Command, res: Result) -> Json | list[Json] | ApiError | None:
    """A command's result as the API shows it: a dict/list, None, or an errors.ApiError.

    The Proposer calls this on the Raft thread under the replica lock, straight after
    apply, because results hold live references (internals.md)."""
    if not res.ok:
        return from_result(res)
    v = res.value
    if v is None:
        return None
    if "lease_expires_at_ms" in v:   # a Heartbeat's answer: the command names its task
        return {"task_id": cmd.task_id,  # type: ignore[attr-defined]
                "lease_expires_at": rfc3339(v["lease_expires_at_ms"]),
                "cancel_requested": bool(v.get("cancel_requested"))}
    if "tasks" in v:
        return [task(t) for t in v["tasks"]]
    if "schedule" in v:
        out: Json = {"schedule": schedule(v["schedule"])}
        if "task" in v:
            out["task"] = None if v["task"] is None else task(v["task"])
        return out
    if "tenant" in v:
        return tenant(v["tenant"])
    if "limit" in v:
        return limit(v["limit"])
    if "pause" in v:
        return pause_change(v)
    if "workflow" in v:
        return workflow(v["workflow"], duplicate=v.get("duplicate"), steps="brief")
    if "session" in v:
        return session(v["session"])
    if "task" in v:
        duplicate = v.get("duplicate")
        return task(v["task"], duplicate=None if duplicate is None else bool(duplicate))
    return None


def session(s: dict) -> Json:
    """A worker session (statemachine/sessions.py, DESIGN 9) as the API shows it."""
    return {"worker_id": s["worker_id"], "tenant": s["tenant"],
            "timeout_s": seconds(s["timeout_ms"]), "opened_at": rfc3339(s["opened_ms"]),
            "created": bool(s["created"]), "given_back": s["given_back"]}


def claimed(t: Task) -> Json:
    """A claimed task as a worker needs it to run it (`Prefer: return=minimal` on a claim):
    no attempt history, result or other stages' times, which were most of rendering,
    sending and parsing a claim's answer."""
    return {"task_id": t.task_id, "tenant": t.tenant, "task_type": t.task_type,
            "state": t.state, "payload": json_fragment(t.payload_json),
            "run_at": rfc3339(t.run_at_ms), "attempt": t.attempt,
            "max_retries": t.max_retries, "timeout_s": seconds(t.timeout_ms),
            "execution_id": t.execution_id, "schedule_id": t.schedule_id,
            "lease_expires_at": rfc3339(t.lease_expires_at_ms),
            "fencing_token": t.fencing_token, "worker_id": t.worker_id,
            "traceparent": t.traceparent}


MINIMAL_COMMANDS = (c.SubmitTask, c.Complete, c.Fail)   # a producer's and a worker's writes


def minimal_result(cmd: c.Command, res: Result) -> Json | list[Json] | ApiError | None:
    """`result`, but a submit, completion or failure that applied is answered by the task's
    id and state only (and a submit's `duplicate`; a failure that left the task retrying,
    its `next_retry_at`, so that a worker can say when it runs again), and a claim's tasks
    as a worker needs them (`claimed`): `Prefer: return=minimal`, DESIGN.md section 7. A
    producer or worker needs no more, and rendering, sending and parsing whole tasks was
    about a tenth of a lifecycle's CPU (bench/notes/2026-12-02-minimal-answers.md)."""
    if res.ok and isinstance(cmd, c.Claim) and isinstance(res.value, dict) \
            and "tasks" in res.value:
        return [claimed(t) for t in res.value["tasks"]]
    if res.ok and isinstance(cmd, MINIMAL_COMMANDS) and isinstance(res.value, dict) \
            and "task" in res.value:
        v = res.value
        t = v["task"]
        out = {"task_id": t.task_id, "state": t.state}
        if isinstance(cmd, c.Fail) and status(t) == RETRYING:
            out["next_retry_at"] = rfc3339(t.run_at_ms)
        if "duplicate" in v:
            out["duplicate"] = bool(v["duplicate"])
        return out
    return result(cmd, res)


def audit_entry(e: AuditEntry) -> Json:
    """An audit trail entry (DESIGN 14.6), as GET /v1/audit and the archive show it."""
    return {"id": e.id, "at": rfc3339(e.at_ms), "actor": e.actor, "action": e.action,
            "tenant": e.tenant, "target": e.target, "request_id": e.request_id,
            "change": orjson.loads(e.change_json)}


def workflow(w: Workflow, *, duplicate: bool | None = None, steps: str = "full") -> Json:
    """A workflow (DESIGN 5.2): its state, counts of its steps by state, and its steps:
    `full` (GET one: deps, results, errors), `brief` (a submit's or cancel's answer: name,
    task id, state; it is rendered under the replica lock) or `none` (a listing)."""
    out: Json = {"workflow_id": w.workflow_id, "tenant": w.tenant, "state": w.state,
                 "cancel_requested": bool(w.cancelled), "idempotency_key": w.idempotency_key,
                 "created_at": rfc3339(w.created_at_ms), "finished_at": rfc3339(w.finished_at_ms),
                 "step_count": len(w.steps), "counts": {k: n for k, n in w.counts.items() if n}}
    if steps == "brief":
        out["steps"] = [{"name": s.name, "task_id": s.task_id, "state": s.state}
                        for s in w.steps]
    elif steps == "full":
        out["steps"] = [step(w, s) for s in w.steps]
    if duplicate is not None:
        out["duplicate"] = bool(duplicate)
    return out


def step(w: Workflow, s: Step) -> Json:
    return {"name": s.name, "task_id": s.task_id, "state": s.state,
            "task_type": s.template.task_type,
            "deps": [w.steps[d].name for d in s.deps],
            "on_parent_failure": s.on_parent_failure, "cancelled_by": s.cause,
            "result": json_fragment(s.result_json), "error": error_line(s.error)}


def parents(w: Workflow, i: int) -> Json:
    """What step i sees of its parents (a worker's `ctx.parents`): name -> state, result
    and error."""
    me = w.steps[i]
    return {"workflow_id": w.workflow_id, "step": me.name,
            "parents": {w.steps[d].name: {"state": w.steps[d].state,
                                          "task_id": w.steps[d].task_id,
                                          "result": json_fragment(w.steps[d].result_json),
                                          "error": error_line(w.steps[d].error)}
                        for d in me.deps}}
