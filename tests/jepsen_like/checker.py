"""The checker: a history plus the cluster's final state -> violations and a summary.

Inputs
- the history (`history.py`): client operations with invoke / ok / fail / info lines, and
  nemesis operations (a fault's invoke starts it, the matching `heal` ok ends it);
- `final`: {"tasks": {task_id: task JSON with attempts}, "digests": [{"node",
  "applied_seq", "digest"}], "converged": bool}, fetched after the healed quiet period.

Server times (leases, starts, fire times) are the replicated state clock; real-time order
between client operations uses the history's monotonic seconds.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

from .history import INFO, OK, pairs
from .timefmt import to_ms
from tsched.node.scheduling.timer import FIRE_LEAD_MS   # a fire is made this long before it is due

TERMINAL = ("completed", "cancelled", "dead_letter")
CHECKS = ("lost", "stale_accepted", "double_lease", "cap_exceeded", "cancel_violations",
          "missed_fires", "duplicate_fires", "digest_mismatch", "unconverged", "diverged_reads",
          "step_before_parents", "callback_twice")
FIRE_START_WINDOW_MS = 5_000      # a fire in quiet time must start this soon after its time
FAULT_GRACE_MS = 8_000            # election (<= 2.5 s) + reconnect + catch-up after a heal
UNAVAILABLE_GAP_S = 1.0           # no acknowledged write for this long is an outage
EXAMPLES_MAX = 5


@dataclass
class Op:
    f: str
    process: str
    node: str | None
    args: dict
    kind: str | None          # ok / fail / info, None when the run ended first
    result: object
    invoke_mono: float
    invoke_wall: float
    done_mono: float | None


@dataclass
class Lease:
    token: int
    task_id: str
    tenant: str | None = None
    start_ms: int | None = None
    granted_end_ms: int | None = None   # the latest lease_expires_at granted for this token
    ended_ms: int | None = None         # when the state machine ended the attempt
    granted_mono: float | None = None   # when a claim answer carried this token

    @property
    def end_ms(self) -> int | None:
        ends = [e for e in (self.granted_end_ms, self.ended_ms) if e is not None]
        return min(ends) if ends else None


@dataclass
class Model:
    ops: list[Op]
    tasks: dict                                         # final state by task_id
    leases: dict = field(default_factory=dict)          # task_id -> {token: Lease}
    faults: list = field(default_factory=list)          # (start_wall_ms, end_wall_ms, kind)


def load_ops(entries: list[dict]) -> list[Op]:
    ops = []
    for inv, done in pairs(entries):
        ops.append(Op(inv["f"], inv.get("process", ""), inv.get("node"), inv.get("args") or {},
                      done["type"] if done else None, done.get("result") if done else None,
                      inv["mono"], inv["wall"], done["mono"] if done else None))
    return ops


def _lease(model: Model, task_id: str, token: int) -> Lease:
    per_task = model.leases.setdefault(task_id, {})
    if token not in per_task:
        per_task[token] = Lease(token, task_id)
    return per_task[token]


def _later(a, b):
    return b if a is None else a if b is None else max(a, b)


def build(entries: list[dict], final: dict) -> Model:
    model = Model(load_ops(entries), final.get("tasks") or {})
    for op in model.ops:
        if op.f == "claim" and op.kind == OK:
            for t in (op.result or {}).get("tasks", []):
                lease = _lease(model, t["task_id"], t["fencing_token"])
                lease.tenant = t.get("tenant")
                lease.start_ms = lease.start_ms or to_ms(t.get("started_at"))
                lease.granted_end_ms = _later(lease.granted_end_ms, to_ms(t.get("lease_expires_at")))
                lease.granted_mono = op.done_mono
        elif op.f == "heartbeat" and op.kind == OK:
            lease = _lease(model, op.args["task_id"], op.args["fencing_token"])
            lease.granted_end_ms = _later(lease.granted_end_ms,
                                          to_ms((op.result or {}).get("lease_expires_at")))
    for task_id, task in model.tasks.items():
        for a in task.get("attempts") or []:
            if a.get("fencing_token") is None:
                continue
            lease = _lease(model, task_id, a["fencing_token"])
            lease.tenant = task.get("tenant")
            lease.start_ms = to_ms(a.get("started_at")) or lease.start_ms
            lease.ended_ms = to_ms(a.get("ended_at"))
            if a.get("outcome") is None and task.get("fencing_token") == a["fencing_token"]:
                lease.granted_end_ms = _later(lease.granted_end_ms, to_ms(task.get("lease_expires_at")))
    model.faults = fault_windows(model.ops)
    return model


def fault_windows(ops: list[Op]) -> list[tuple[int, int, str]]:
    """Each nemesis fault from its start to its heal, in wall ms (open faults run on)."""
    windows, open_faults = [], []
    for op in sorted((o for o in ops if o.process == "nemesis"), key=lambda o: o.invoke_mono):
        if op.f != "heal":
            open_faults.append(op)
        elif open_faults:
            start = open_faults.pop(0)
            end_wall = op.invoke_wall if op.done_mono is None else \
                op.invoke_wall + (op.done_mono - op.invoke_mono)
            skew_ms = abs(int((start.result or {}).get("offset_ms", 0)))
            windows.append((int(start.invoke_wall * 1000), int(end_wall * 1000) + skew_ms, start.f))
    for op in open_faults:
        windows.append((int(op.invoke_wall * 1000), 2 ** 62, op.f))
    return windows


# --- the checks ------------------------------------------------------------------------

def check_lost(model: Model) -> list[dict]:
    cancelled = {op.args.get("task_id") for op in model.ops if op.f == "cancel" and op.kind == OK}
    out, seen = [], set()
    for op in model.ops:
        if op.f != "submit" or op.kind != OK:
            continue
        task_id = (op.result or {}).get("task_id")
        if task_id in seen:
            continue
        seen.add(task_id)
        task = model.tasks.get(task_id)
        if task is None:
            out.append({"task_id": task_id, "why": "missing from the final state"})
        elif task.get("state") not in TERMINAL and task_id not in cancelled:
            out.append({"task_id": task_id, "why": f"never terminal: {task.get('state')}"})
    return out


def check_stale_accepted(model: Model) -> list[dict]:
    """A completion (or heartbeat) accepted with a token that was not the task's latest."""
    out = []
    for op in model.ops:
        if op.f not in ("complete", "fail", "heartbeat") or op.kind != OK:
            continue
        task_id, token = op.args.get("task_id"), op.args.get("fencing_token")
        for other in model.leases.get(task_id, {}).values():
            if other.token <= token:
                continue
            granted_before = other.granted_mono is not None and other.granted_mono < op.invoke_mono
            # a completed task is never claimed again, so any higher token condemns it
            if granted_before or op.f == "complete":
                out.append({"task_id": task_id, "op": op.f, "token": token,
                            "newer_token": other.token})
                break
    return out


def check_double_lease(model: Model) -> list[dict]:
    out = []
    for task_id, by_token in model.leases.items():
        leases = sorted(by_token.values(), key=lambda x: x.token)
        for i, older in enumerate(leases):
            end = older.end_ms
            for newer in leases[i + 1:]:
                if end is not None and newer.start_ms is not None and newer.start_ms < end:
                    out.append({"task_id": task_id, "tokens": [older.token, newer.token],
                                "overlap_ms": end - newer.start_ms})
    return out


def tenant_caps(model: Model) -> dict[str, int]:
    caps = {}
    for op in model.ops:
        if op.f == "set_tenant" and op.kind == OK and op.args.get("max_running") is not None:
            caps[op.args["tenant"]] = int(op.args["max_running"])
    return caps


def check_cap_exceeded(model: Model) -> list[dict]:
    """Sweep the running intervals per tenant; an end at t frees the slot for a start at t."""
    out = []
    caps = tenant_caps(model)
    events = defaultdict(list)
    for by_token in model.leases.values():
        for lease in by_token.values():
            if lease.tenant in caps and caps[lease.tenant] > 0 and lease.start_ms is not None:
                events[lease.tenant].append((lease.start_ms, 1, lease.task_id))
                end = lease.ended_ms if lease.ended_ms is not None else 2 ** 62
                events[lease.tenant].append((end, -1, lease.task_id))
    for tenant, evs in events.items():
        running = 0
        for at_ms, delta, task_id in sorted(evs, key=lambda e: (e[0], e[1])):
            running += delta
            if delta > 0 and running > caps[tenant]:
                out.append({"tenant": tenant, "at_ms": at_ms, "running": running,
                            "cap": caps[tenant], "task_id": task_id})
    return out


def check_cancel_violations(model: Model) -> list[dict]:
    out = []
    acked = {}
    for op in model.ops:
        if op.f == "cancel" and op.kind == OK:
            task_id = op.args.get("task_id")
            acked[task_id] = min(acked.get(task_id, op.done_mono), op.done_mono)
    for op in model.ops:
        if op.f != "claim" or op.kind != OK:
            continue
        for t in (op.result or {}).get("tasks", []):
            done = acked.get(t["task_id"])
            if done is not None and op.invoke_mono > done:
                out.append({"task_id": t["task_id"], "why": "claimed after an acknowledged cancel",
                            "token": t.get("fencing_token")})
    for task_id in acked:
        state = (model.tasks.get(task_id) or {}).get("state")
        if state not in ("cancelled", "completed", None):
            out.append({"task_id": task_id, "why": f"acknowledged cancel ended as {state}"})
    return out


def _in_fault(at_ms: int, faults) -> bool:
    return any(start - 1_000 <= at_ms <= end + FAULT_GRACE_MS for start, end, _ in faults)


def schedule_windows(model: Model) -> list[dict]:
    """Per schedule: the fire times that must exist, from the put answer to the stop."""
    out = {}
    for op in model.ops:
        key = (op.args.get("tenant", "default"), op.args.get("schedule_id"))
        if op.f == "put_schedule" and op.kind == OK:
            first = to_ms((op.result or {}).get("next_fire_at"))
            out[key] = {"tenant": key[0], "schedule_id": key[1], "first_ms": first,
                        "every_ms": int(op.args.get("every_ms", 1000)), "stop_ms": None}
        elif op.f == "stop_schedule" and key in out and out[key]["stop_ms"] is None:
            out[key]["stop_ms"] = int(op.invoke_wall * 1000)
    return list(out.values())


def unsupported_schedules(entries: list[dict]) -> set:
    return {(e.get("tenant", "default"), e.get("schedule_id")) for e in entries
            if e.get("f") == "schedule_unsupported"}


def fire_records(model: Model) -> dict:
    """(tenant, schedule_id) -> fire_ms -> {(outcome, task_id)}, from schedule reads."""
    out = defaultdict(lambda: defaultdict(set))
    for op in model.ops:
        if op.f == "read_schedule" and op.kind == OK:
            key = (op.args.get("tenant", "default"), op.args.get("schedule_id"))
            for r in (op.result or {}).get("fires", []):
                out[key][to_ms(r.get("fire_at"))].add((r.get("outcome"), r.get("task_id")))
    return out


def _never_retried(task: dict) -> bool:
    """Its run_at is still its fire time: a retry moves run_at to the backoff's end."""
    attempts = task.get("attempts") or []
    return len(attempts) == 0 or (len(attempts) == 1 and
                                  attempts[0].get("outcome") in (None, "completed", "cancelled"))


def _occurrences(tasks: list[dict], records: dict):
    """fire_ms -> task ids, the records' outcomes per fire, and tasks of unknown fire."""
    by_fire, outcomes = defaultdict(set), defaultdict(set)
    placed = set()
    for fire_ms, recs in records.items():
        for outcome, task_id in recs:
            outcomes[fire_ms].add(outcome)
            if task_id is not None:
                by_fire[fire_ms].add(task_id)
                placed.add(task_id)
    unknown = []
    for t in tasks:
        if t["task_id"] in placed:
            continue
        if _never_retried(t):
            by_fire[to_ms(t.get("run_at"))].add(t["task_id"])
        else:
            unknown.append(t)
    return by_fire, outcomes, unknown


def _first_start(task: dict | None) -> int | None:
    starts = [to_ms(a.get("started_at")) for a in (task or {}).get("attempts") or []]
    return min((s for s in starts if s is not None), default=None)


def check_fires(model: Model, skip=frozenset()) -> tuple[list[dict], list[dict]]:
    """Each fire time of a per-period schedule: exactly one task, started on time when no
    fault was near. A task whose fire time is unknown (retried, and its fire record not
    seen) may stand in for one uncovered fire at or before its creation (the leader makes
    a fire up to FIRE_LEAD_MS before it is due)."""
    missed, duplicate = [], []
    records = fire_records(model)
    for sched in schedule_windows(model):
        key = (sched["tenant"], sched["schedule_id"])
        if sched["first_ms"] is None or sched["stop_ms"] is None or key in skip:
            continue
        tasks = [t for t in model.tasks.values() if t.get("schedule_id") == key[1]
                 and t.get("tenant", "default") == key[0]]
        by_fire, outcomes, unknown = _occurrences(tasks, records[key])
        for fire_ms, ids in sorted(by_fire.items()):
            if len(ids) > 1:
                duplicate.append({"schedule_id": key[1], "fire_ms": fire_ms,
                                  "task_ids": sorted(ids)})
        spare = sorted(to_ms(t.get("created_at")) or 0 for t in unknown)
        # the last fires before the stop may still be in flight when it lands
        for fire_ms in range(sched["first_ms"], sched["stop_ms"] - 2_000 + 1, sched["every_ms"]):
            ids = by_fire.get(fire_ms)
            if not ids:
                usable = [c for c in spare if c >= fire_ms - FIRE_LEAD_MS]
                if usable and not (outcomes.get(fire_ms, set()) - {"ran"}):
                    spare.remove(usable[0])
                    continue
                if _stopped_behind_a_clock(fire_ms, sched["stop_ms"], model.faults):
                    continue
                missed.append({"schedule_id": key[1], "fire_ms": fire_ms,
                               "why": ",".join(sorted(outcomes.get(fire_ms, ()))) or "no task"})
                continue
            if _in_fault(fire_ms, model.faults):
                continue
            first = min((s for s in (_first_start(model.tasks.get(i)) for i in ids)
                         if s is not None), default=None)
            if first is None or first - fire_ms > FIRE_START_WINDOW_MS:
                missed.append({"schedule_id": key[1], "fire_ms": fire_ms,
                               "why": "not started in time", "started_ms": first})
    return missed, duplicate


def _stopped_behind_a_clock(fire_ms: int, stop_ms: int, faults) -> bool:
    """A leader whose clock runs behind makes a fire only once its clock reaches it: a fire
    inside a clock fault's window (widened by the offset) is not owed when the schedule was
    stopped before that window ended (plus the usual grace)."""
    return any(kind == "clock" and start - 1_000 <= fire_ms <= end
               and stop_ms <= end + FAULT_GRACE_MS for start, end, kind in faults)


def workflows(model: Model) -> list[dict]:
    """Each acknowledged workflow once: {"id", "task_of": name -> task id, "deps": name ->
    parent names, "run": names of `on_parent_failure: run` steps}."""
    out, seen = [], set()
    for op in model.ops:
        result = op.result or {}
        if op.f != "submit_workflow" or op.kind != OK or result.get("workflow_id") in seen:
            continue
        seen.add(result["workflow_id"])
        out.append({"id": result["workflow_id"],
                    "task_of": {name: tid for name, tid in result.get("steps") or []},
                    "deps": op.args.get("deps") or {}, "run": set(op.args.get("run_steps") or ())})
    return out


def check_step_order(model: Model) -> list[dict]:
    """No step ran before its parents finished (state clock). A step that has a task has
    parents that all completed, and it was created, and every attempt of it started, no
    earlier than the last of them completed. A `run` step needs its parents finished
    either way: each ended, and is terminal at the end, and each had an attempt end by
    the step's creation (a parent replayed after the step started ends again later)."""
    out = []
    for wf in workflows(model):
        for name, parents in wf["deps"].items():
            child = model.tasks.get(wf["task_of"].get(name))
            if child is None or not parents:
                continue
            found = [model.tasks.get(wf["task_of"].get(p)) for p in parents]
            why = (_run_step_early if name in wf["run"] else _step_early)(child, found)
            if why:
                out.append({"workflow_id": wf["id"], "step": name, "why": why,
                            "parents": [p and p.get("state") for p in found]})
    return out


def _step_early(child: dict, parents: list) -> str | None:
    if any(p is None or p.get("state") != "completed" for p in parents):
        return "has a task while a parent is not completed"
    done_ms = max(to_ms(p.get("completed_at")) or 0 for p in parents)
    starts = [to_ms(a.get("started_at")) or 0 for a in child.get("attempts") or []]
    if (to_ms(child.get("created_at")) or 0) < done_ms or any(s < done_ms for s in starts):
        return "created or started before its last parent completed"
    return None


def _run_step_early(child: dict, parents: list) -> str | None:
    if any(p is None or p.get("state") not in TERMINAL for p in parents):
        return "has a task while a parent is not finished"
    created = to_ms(child.get("created_at")) or 0
    for p in parents:
        ends = [to_ms(a.get("ended_at")) for a in p.get("attempts") or []]
        if ends and not any(e is not None and e <= created for e in ends):
            return "created before a parent's attempt ended"
    return None


def check_callback_twice(model: Model) -> list[dict]:
    """No callback ran twice as far as fencing goes: its accepted completions carry one
    token, and its final record has at most one completed attempt."""
    callbacks = {wf["task_of"].get("cb") for wf in workflows(model)} - {None}
    tokens: dict = defaultdict(set)
    for op in model.ops:
        if op.f == "complete" and op.kind == OK and op.args.get("task_id") in callbacks:
            tokens[op.args["task_id"]].add(op.args.get("fencing_token"))
    out = []
    for tid in sorted(callbacks):
        attempts = (model.tasks.get(tid) or {}).get("attempts") or []
        completed = sum(1 for a in attempts if a.get("outcome") == "completed")
        if len(tokens[tid]) > 1 or completed > 1:
            out.append({"task_id": tid, "accepted_tokens": sorted(tokens[tid]),
                        "completed_attempts": completed})
    return out


def check_digests(final: dict) -> tuple[list[dict], list[dict]]:
    by_seq = defaultdict(dict)     # (shard, applied_seq) -> digest -> nodes
    for s in final.get("digests") or []:
        key = (s.get("shard", 0), s["applied_seq"])
        by_seq[key].setdefault(s["digest"], set()).add(s["node"])
    mismatch = [{"shard": shard, "applied_seq": seq,
                 "digests": {d: sorted(n) for d, n in ds.items()}}
                for (shard, seq), ds in sorted(by_seq.items()) if len(ds) > 1]
    unconverged = [] if final.get("converged", True) else [
        {"why": "nodes never reached one applied_seq after healing"}]
    return mismatch, unconverged


def check_diverged_reads(final: dict) -> list[dict]:
    """A node that had applied a task's acknowledged submit (its applied_seq just before
    the read was at least the ack's) answered that the task does not exist, with no restart
    in between (its seq did not go back): it serves from a replica that diverged."""
    return [r for r in final.get("reads") or []
            if r["status"] == 404 and r["seq_before"] >= r["ack_seq"] > 0
            and (r["seq_after"] or 0) >= r["seq_before"]]


def unavailability(model: Model, gap_s: float = UNAVAILABLE_GAP_S) -> list[dict]:
    """Stretches of the run with write attempts but no acknowledged write."""
    writes = sorted((o for o in model.ops if o.f == "submit"), key=lambda o: o.invoke_mono)
    if not writes:
        return []
    t0 = min(o.invoke_mono for o in model.ops)
    oks = sorted(o.done_mono for o in writes if o.kind == OK)
    windows, prev = [], writes[0].invoke_mono
    for t in oks + [max(o.done_mono or o.invoke_mono for o in writes)]:
        if t - prev > gap_s:
            windows.append({"start_s": round(prev - t0, 3), "end_s": round(t - t0, 3),
                            "duration_s": round(t - prev, 3)})
        prev = max(prev, t)
    return windows


def check(entries: list[dict], final: dict) -> dict:
    """All checks: {"checks": {name: count}, "violations": {name: examples}, ...}."""
    model = build(entries, final)
    skip = unsupported_schedules(entries)
    missed, duplicate = check_fires(model, skip)
    mismatch, unconverged = check_digests(final)
    found = {
        "lost": check_lost(model),
        "stale_accepted": check_stale_accepted(model),
        "double_lease": check_double_lease(model),
        "cap_exceeded": check_cap_exceeded(model),
        "cancel_violations": check_cancel_violations(model),
        "missed_fires": missed,
        "duplicate_fires": duplicate,
        "digest_mismatch": mismatch,
        "unconverged": unconverged,
        "diverged_reads": check_diverged_reads(final),
        "step_before_parents": check_step_order(model),
        "callback_twice": check_callback_twice(model),
    }
    nemesis = defaultdict(int)
    for op in model.ops:
        if op.process == "nemesis" and op.f != "heal":
            nemesis[op.f] += 1
    windows = unavailability(model)
    return {
        "ops": sum(1 for o in model.ops if o.process != "nemesis"),
        "nemesis": dict(sorted(nemesis.items())),
        "checks": {name: len(found[name]) for name in CHECKS},
        "valid": not any(found.values()),
        "unavailability": {"windows": len(windows),
                           "total_s": round(sum(w["duration_s"] for w in windows), 3),
                           "longest_s": max((w["duration_s"] for w in windows), default=0.0),
                           "list": windows},
        "indeterminate_ops": sum(1 for o in model.ops if o.kind == INFO),
        "fires_checked": sum(1 for s in schedule_windows(model)
                             if (s["tenant"], s["schedule_id"]) not in skip),
        "workflows_checked": len(workflows(model)),
        "violations": {k: v[:EXAMPLES_MAX] for k, v in found.items() if v},
    }


def summarize(seed: int, duration_s: float, report: dict) -> dict:
    return {"seed": seed, "duration_s": duration_s, "ops": report["ops"],
            "nemesis": report["nemesis"], "checks": report["checks"], "valid": report["valid"],
            "schedules_checked": report["fires_checked"],
            "workflows_checked": report.get("workflows_checked", 0),
            "unavailability": {k: v for k, v in report["unavailability"].items() if k != "list"}}


def write_summary(out_dir: str, seed: int, duration_s: float, report: dict) -> dict:
    summary = summarize(seed, duration_s, report)
    with open(f"{out_dir}/summary.json", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    with open(f"{out_dir}/violations.json", "w", encoding="utf-8") as f:
        json.dump({"violations": report["violations"],
                   "unavailability": report["unavailability"]["list"]}, f, indent=2)
    return summary
