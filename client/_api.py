"""The API calls, written once for both clients.

Each method builds a `Call` and hands it to `self._run(call, post)`, which the sync client
runs at once and the async client returns as a coroutine. `post` picks the useful part
out of the answer. Paged listings are the only calls each client iterates itself.
"""
from __future__ import annotations

from typing import Any, Callable
from urllib.parse import quote

from tsched.statemachine.limits import LIMITS
from tsched.statemachine.tiers import TIER_NAME

from . import otel
from ._core import Call, to_time

TEMPLATE_FIELDS = frozenset({"priority", "timeout_s", "max_retries", "retry"})
CLAIM_SLACK_S = 10.0   # a long-poll may take wait_s plus a forward to the leader
TIER_WEIGHT_MAX = LIMITS.tier_weight_max


def _seg(value: str) -> str:
    """A path segment: ids are quoted so `a/b` cannot address another resource."""
    if not isinstance(value, str) or not value:
        raise ValueError("an id must be a non-empty string")
    return quote(value, safe="")


def _key(name: str) -> Callable[[Any], Any]:
    return lambda body: body.get(name) if isinstance(body, dict) else None


def _task_fields(task_type: str, payload: Any, fields: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"task_type": task_type}
    if payload is not None:
        body["payload"] = payload
    for name, value in fields.items():
        if value is not None:
            body[name] = to_time(value) if name == "run_at" else value
    return body


class ApiCalls:
    """Mixin: requires `_run(call, post)`. A call returns what `_run` does, the answer
    (Client) or a coroutine of it (AsyncClient): hence `Any`."""

    def _run(self, call: Call, post: Callable[[Any], Any] | None = None) -> Any:  # pragma: no cover
        raise NotImplementedError

    # --- tasks ---------------------------------------------------------------------
    def submit(self, task_type: str, payload: Any = None, **fields: Any) -> Any:
        """Submit one task. `fields`: tenant, priority, run_at (datetime, RFC 3339 or epoch
        seconds), delay_s, timeout_s, max_retries, retry, idempotency_key, limits (names of
        declared limits), traceparent (with the `otel` extra: the current span's, otel.py).
        Returns the task (with `duplicate`)."""
        body = otel.with_traceparent(_task_fields(task_type, payload, fields))
        return self._run(Call("POST", "/v1/tasks", body=body, write=True))

    def submit_many(self, tasks: list[dict[str, Any]], minimal: bool = False) -> Any:
        """Submit a batch in one request (one Raft entry). Each dict has the submit fields.
        `minimal`: each created task is answered `{"task_id", "state", "duplicate"}` only
        (less for the cluster to render and send)."""
        items = [_task_fields(t["task_type"], t.get("payload"),
                              {k: v for k, v in t.items() if k not in ("task_type", "payload")})
                 for t in tasks]
        traceparent = otel.current_traceparent()   # the batch's submitter: one for all
        if traceparent is not None:
            for item in items:
                item.setdefault(otel.TRACEPARENT, traceparent)
        return self._run(Call("POST", "/v1/tasks", body={"tasks": items}, write=True,
                              minimal=minimal),
                         _key("tasks"))

    def get(self, task_id: str, consistency: str | None = None,
            deadline_s: float | None = None) -> Any:
        """One task. `consistency="linearizable"`: read at the leader (its answer of a
        pending task also says whether a worker asked for its type lately,
        `unclaimed_type`). `deadline_s`: give up sooner than the client's timeout."""
        return self._run(Call("GET", f"/v1/tasks/{_seg(task_id)}",
                              params={"consistency": consistency}, deadline_s=deadline_s))

    def cancel(self, task_id: str) -> Any:
        return self._run(Call("POST", f"/v1/tasks/{_seg(task_id)}/cancel", write=True))

    def replay(self, task_id: str) -> Any:
        """Send a dead-lettered task back to `pending`."""
        return self._run(Call("POST", f"/v1/tasks/{_seg(task_id)}/replay", write=True))

    def discard(self, task_id: str) -> Any:
        """Discard a dead-lettered task: it stays, `discarded`, for audit until retention."""
        return self._run(Call("POST", f"/v1/tasks/{_seg(task_id)}/discard", write=True))

    # --- workflows (DESIGN 5.2) -------------------------------------------------------
    def submit_workflow(self, steps: list[dict[str, Any]], tenant: str | None = None,
                        idempotency_key: str | None = None) -> Any:
        """Submit a graph of steps in one request (one Raft entry): each step a dict with
        `name`, `task_type`, the submit fields (payload, priority, timeout_s, max_retries,
        retry), `deps` (names of other steps) and `on_parent_failure` ("cancel" | "run").
        Returns the workflow with each step's name, task_id and state."""
        body: dict[str, Any] = {"steps": steps}
        if tenant is not None:
            body["tenant"] = tenant
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        otel.with_step_contexts(body)   # every step's span is of the submitter's trace
        return self._run(Call("POST", "/v1/workflows", body=body, write=True))

    def get_workflow(self, workflow_id: str, consistency: str | None = None) -> Any:
        """A workflow: its state, counts by state and every step (deps, result, error)."""
        return self._run(Call("GET", f"/v1/workflows/{_seg(workflow_id)}",
                              params={"consistency": consistency}))

    def cancel_workflow(self, workflow_id: str) -> Any:
        """Cancel a workflow: waiting and pending steps cancelled, running ones asked to
        stop (as a task cancel)."""
        return self._run(Call("POST", f"/v1/workflows/{_seg(workflow_id)}/cancel",
                              write=True))

    def parents(self, task_id: str) -> Any:
        """What a step's task sees of its parents: {"workflow_id", "step", "parents":
        {name: {"state", "task_id", "result", "error"}}} (none for a plain task)."""
        return self._run(Call("GET", f"/v1/tasks/{_seg(task_id)}/parents"))

    # --- worker calls --------------------------------------------------------------
    def claim(self, worker_id: str, task_types: list[str], max_tasks: int = 1,
              wait_s: float = 0, lease_s: float = 30, prefetch_ms: int = 0,
              key: str | None = None, minimal: bool = False,
              priorities: tuple[int, int] | None = None,
              tier_weights: dict[str, int] | None = None,
              slots: dict[str, Any] | None = None) -> Any:
        """Long-poll for up to `max_tasks` tasks. Returns the list of claimed tasks.
        `minimal`: each task has only what a worker needs to run it (its id, tenant, type,
        state, payload, run_at, attempt, max_retries, timeout_s, execution_id, schedule_id,
        lease_expires_at, fencing_token and worker_id). `priorities=(lo, hi)`: only tasks whose
        effective priority is in lo..hi (inclusive). `tier_weights={"critical": 50, "high":
        30, ...}`: only those tiers' tasks, split by weight (1..1000 each; not with
        `priorities`; DESIGN 5.1). `slots={"total": n, "busy": {task type: n}}`: the
        worker's slots, for the autoscaling gauges (DESIGN 14.4)."""
        body = {"worker_id": worker_id, "task_types": list(task_types), "max_tasks": max_tasks,
                "wait_s": wait_s, "lease_s": lease_s, "prefetch_ms": prefetch_ms,
                **_range(priorities, tier_weights), **_slots(slots)}
        return self._run(Call("POST", "/v1/claims", body=body, write=True, key=key,
                              read_timeout_s=wait_s + CLAIM_SLACK_S, minimal=minimal,
                              to_leader=True),
                         _key("tasks"))

    def claim_and_complete(self, worker_id: str, task_types: list[str],
                           completions: list[dict[str, Any]], max_tasks: int = 1,
                           wait_s: float = 0, lease_s: float = 30, prefetch_ms: int = 0,
                           key: str | None = None, minimal: bool = False,
                           priorities: tuple[int, int] | None = None,
                           tier_weights: dict[str, int] | None = None,
                           slots: dict[str, Any] | None = None) -> Any:
        """A claim carrying completions (the items of `completions()`), applied before it
        in one Raft entry: returns `{"tasks": [...], "completions": [result, ...]}`.
        `minimal`: each completion that applied is answered `{"task_id", "state"}` only,
        and each task has only what a worker needs (as `claim(minimal=True)`)."""
        body = {"worker_id": worker_id, "task_types": list(task_types), "max_tasks": max_tasks,
                "wait_s": wait_s, "lease_s": lease_s, "prefetch_ms": prefetch_ms,
                "completions": completions, **_range(priorities, tier_weights),
                **_slots(slots)}
        return self._run(Call("POST", "/v1/claims", body=body, write=True, key=key,
                              read_timeout_s=wait_s + CLAIM_SLACK_S, minimal=minimal,
                              to_leader=True))

    def heartbeat(self, task_id: str, fencing_token: int, lease_s: float | None = None,
                  progress: float | None = None, message: str = "") -> Any:
        """`progress` (0..1, with an optional `message`): the run's progress (DESIGN 9)."""
        body = {"fencing_token": fencing_token, "lease_s": lease_s,
                "progress": None if progress is None else {"fraction": progress,
                                                           "message": message}}
        return self._run(Call("POST", f"/v1/tasks/{_seg(task_id)}/heartbeat",
                              body={k: v for k, v in body.items() if v is not None}, write=True))

    def heartbeats(self, items: list[dict[str, Any]], deadline_s: float | None = None,
                   slots: dict[str, Any] | None = None) -> Any:
        """Batch: [{"task_id", "fencing_token", "lease_s", "progress"}] -> results in
        order. `slots`: the worker's {"worker_id", "task_types", "total", "busy"}."""
        return self._run(Call("POST", "/v1/heartbeats", body={"heartbeats": items,
                                                              **_slots(slots)}, write=True,
                              deadline_s=deadline_s, leader_first=True), _key("results"))

    def complete(self, task_id: str, fencing_token: int, result: Any = None) -> Any:
        return self._run(Call("POST", f"/v1/tasks/{_seg(task_id)}/complete",
                              body={"fencing_token": fencing_token, "result": result}, write=True))

    def fail(self, task_id: str, fencing_token: int, error: str = "", retryable: bool = True,
             retry_after_s: float | None = None) -> Any:
        body: dict[str, Any] = {"fencing_token": fencing_token, "error": error,
                                "retryable": retryable}
        if retry_after_s is not None:
            body["retry_after_s"] = retry_after_s
        return self._run(Call("POST", f"/v1/tasks/{_seg(task_id)}/fail", body=body,
                              write=True))

    def completions(self, items: list[dict[str, Any]], key: str | None = None,
                    deadline_s: float | None = None, minimal: bool = False) -> Any:
        """Batch complete/fail -> results (task or error object) in order. Pass the same `key`
        when repeating a batch whose outcome is unknown. `minimal`: a result that applied
        is `{"task_id", "state"}`, not the whole task (less for the cluster to send)."""
        return self._run(Call("POST", "/v1/completions", body={"completions": items}, write=True,
                              key=key, deadline_s=deadline_s, minimal=minimal), _key("results"))

    def release(self, task_id: str, fencing_token: int) -> Any:
        """Give a claimed task back without using up a retry (a stopping worker)."""
        return self._run(Call("POST", f"/v1/tasks/{_seg(task_id)}/release",
                              body={"fencing_token": fencing_token}, write=True))

    def keep_session(self, worker_id: str, timeout_s: float,
                     deadline_s: float | None = None) -> Any:
        """Open the worker's session, or keep it alive (DESIGN 9, "Worker sessions"): once
        the cluster has not heard from the worker for `timeout_s`, every task leased to it
        is given back. Answers the session: `created` says it was (re)opened now, so a
        worker that had one lost it (its tasks were given back)."""
        return self._run(Call("PUT", f"/v1/sessions/{_seg(worker_id)}",
                              body={"timeout_s": timeout_s}, write=True,
                              deadline_s=deadline_s, to_leader=True))

    def end_session(self, worker_id: str, deadline_s: float | None = None) -> Any:
        """End the worker's session (a worker stopping; its tasks are not touched)."""
        return self._run(Call("DELETE", f"/v1/sessions/{_seg(worker_id)}", write=True,
                              deadline_s=deadline_s))

    def sessions(self, consistency: str | None = None) -> Any:
        """The open worker sessions: [{"worker_id", "tenant", "timeout_s", "opened_at",
        "silent_s"}]. `silent_s`, since the leader last heard from the worker, is known at
        the leader only: ask with `consistency="linearizable"` (None elsewhere)."""
        return self._run(Call("GET", "/v1/sessions", params={"consistency": consistency}),
                         _key("sessions"))

    def rate_limited(self, task_id: str, fencing_token: int, limit: str,
                     after_s: float) -> Any:
        """A handler's RateLimited: the task's partition of `limit` claims nothing for
        `after_s`, for every worker; the task goes back to pending, its attempt not counted."""
        return self._run(Call("POST", f"/v1/tasks/{_seg(task_id)}/rate-limited",
                              body={"fencing_token": fencing_token, "limit": limit,
                                    "after_s": after_s}, write=True))

    # --- keyed limits --------------------------------------------------------------
    def put_limit(self, name: str, rate: int | None = None, per_s: float | None = None,
                  concurrency: int | None = None, partition_by: str | None = None) -> Any:
        """Declare or change a limit: at most `rate` claims in any window of `per_s`
        (default 1) and/or `concurrency` running, per value of `partition_by` ("tenant" or
        a top-level payload field; None: one budget)."""
        pairs = (("rate", rate), ("per_s", per_s), ("concurrency", concurrency),
                 ("partition_by", partition_by))
        return self._run(Call("PUT", f"/v1/limits/{_seg(name)}",
                              body={k: v for k, v in pairs if v is not None}, write=True))

    def get_limit(self, name: str) -> Any:
        return self._run(Call("GET", f"/v1/limits/{_seg(name)}"))

    def list_limits(self) -> Any:
        return self._run(Call("GET", "/v1/limits"), _key("limits"))

    def delete_limit(self, name: str) -> Any:
        return self._run(Call("DELETE", f"/v1/limits/{_seg(name)}", write=True))

    # --- paused queues (issue 48) ----------------------------------------------------
    def pause_queue(self, task_type: str | None = None, tenant: str | None = None,
                    reason: str | None = None) -> Any:
        """Stop claims of a task type, a tenant's tasks, or both (at least one) until a
        resume: the tasks stay pending and their schedules fire. Admin only."""
        pairs = (("task_type", task_type), ("tenant", tenant), ("reason", reason))
        return self._run(Call("POST", "/v1/queues/pause",
                              body={k: v for k, v in pairs if v is not None}, write=True))

    def resume_queue(self, task_type: str | None = None, tenant: str | None = None) -> Any:
        """Lift the pause of exactly this selector (not_found when none stands)."""
        pairs = (("task_type", task_type), ("tenant", tenant))
        return self._run(Call("POST", "/v1/queues/resume",
                              body={k: v for k, v in pairs if v is not None}, write=True))

    def list_pauses(self) -> Any:
        """The standing pauses."""
        return self._run(Call("GET", "/v1/queues"), _key("pauses"))

    # --- schedules -----------------------------------------------------------------
    def put_schedule(self, schedule_id: str, cron: str, task_type: str, payload: Any = None,
                     timezone: str | None = None, tenant: str | None = None, **fields: Any) -> Any:
        """Create or replace a schedule. Task template `fields`: priority, timeout_s,
        max_retries, retry; schedule `fields`: overlap, misfire, catchup_window_s, paused,
        start_at, end_at, jitter_s."""
        task: dict[str, Any] = {"task_type": task_type}
        if payload is not None:
            task["payload"] = payload
        body: dict[str, Any] = {"cron": cron, "task": task}
        for name, value in (("timezone", timezone), ("tenant", tenant)):
            if value is not None:
                body[name] = value
        for name, value in fields.items():
            if value is None:
                continue
            if name in TEMPLATE_FIELDS:
                task[name] = value
            else:
                body[name] = to_time(value) if name in ("start_at", "end_at") else value
        return self._run(Call("PUT", f"/v1/schedules/{_seg(schedule_id)}", body=body, write=True))

    def get_schedule(self, schedule_id: str, tenant: str | None = None) -> Any:
        return self._run(Call("GET", f"/v1/schedules/{_seg(schedule_id)}",
                              params={"tenant": tenant}))

    def delete_schedule(self, schedule_id: str, tenant: str | None = None) -> Any:
        return self._run(Call("DELETE", f"/v1/schedules/{_seg(schedule_id)}",
                              params={"tenant": tenant}, write=True))

    def _schedule_action(self, schedule_id: str, action: str, tenant: str | None) -> Any:
        return self._run(Call("POST", f"/v1/schedules/{_seg(schedule_id)}/{action}",
                              params={"tenant": tenant}, write=True))

    def pause_schedule(self, schedule_id: str, tenant: str | None = None) -> Any:
        return self._schedule_action(schedule_id, "pause", tenant)

    def resume_schedule(self, schedule_id: str, tenant: str | None = None) -> Any:
        return self._schedule_action(schedule_id, "resume", tenant)

    def trigger_schedule(self, schedule_id: str, tenant: str | None = None) -> Any:
        return self._schedule_action(schedule_id, "trigger", tenant)

    def cron_preview(self, cron: str, timezone: str | None = None, from_: Any = None,
                     count: int | None = None) -> Any:
        """The next fire times (RFC 3339 in the zone) of an expression."""
        params = {"cron": cron, "timezone": timezone, "from": to_time(from_), "count": count}
        return self._run(Call("GET", "/v1/cron/preview", params=params, replica_read=False),
                         _key("fires"))

    # --- tenants -------------------------------------------------------------------
    def set_tenant(self, tenant: str, max_running: int | None = None,
                   weight: int | None = None) -> Any:
        pairs = (("max_running", max_running), ("weight", weight))
        body = {k: v for k, v in pairs if v is not None}
        return self._run(Call("PUT", f"/v1/tenants/{_seg(tenant)}", body=body, write=True))

    def get_tenant(self, tenant: str) -> Any:
        return self._run(Call("GET", f"/v1/tenants/{_seg(tenant)}"))

    def list_tenants(self) -> Any:
        return self._run(Call("GET", "/v1/tenants"), _key("tenants"))

    def stats(self, tenant: str | None = None) -> Any:
        """Queue counts (by state, priority, tenant; with shards, `by_shard` too)."""
        return self._run(Call("GET", "/v1/stats", params={"tenant": tenant}))

    def archive_page(self, task_id: str | None = None, tenant: str | None = None,
                     from_: Any = None, to: Any = None, limit: int | None = None,
                     cursor: str | None = None) -> Any:
        """One page of `GET /v1/archive` (DESIGN 14.3): the answering node's archived task
        records of one task id or tenant; `from_`/`to` bound completed_at (RFC 3339, epoch
        seconds or YYYY-MM-DD). Follow `next_cursor` on the same client."""
        return self._run(Call("GET", "/v1/archive", replica_read=False, params={
            "task_id": task_id, "tenant": tenant, "from": from_, "to": to, "limit": limit,
            "cursor": cursor}))

    # --- cluster -------------------------------------------------------------------
    def cluster_status(self) -> Any:
        return self._run(Call("GET", "/v1/cluster", replica_read=False))

    def transfer_leadership(self, to: str | None = None) -> Any:
        body = {"to": to} if to else {}
        return self._run(Call("POST", "/v1/cluster/transfer-leadership", body=body, write=True))

    def members(self) -> Any:
        """The cluster's members: {"members": [{"id", "raft", "http"}], "leader"}."""
        return self._run(Call("GET", "/v1/cluster/members", replica_read=False))

    def add_member(self, node_id: str, raft: str, http: str) -> Any:
        """Add a member (admin; DESIGN 6.2); answers the members once it is committed."""
        return self._run(Call("POST", "/v1/cluster/members", write=True,
                              body={"id": node_id, "raft": raft, "http": http}))

    def remove_member(self, node_id: str) -> Any:
        """Remove a member (the leader hands over first when it is the one removed)."""
        return self._run(Call("DELETE", f"/v1/cluster/members/{_seg(node_id)}", write=True))


TERMINAL_STATES = ("completed", "cancelled", "dead_letter", "discarded")


def _slots(slots: dict[str, Any] | None) -> dict[str, Any]:
    return {} if slots is None else {"slots": slots}


def _range(priorities: tuple[int, int] | None,
           tier_weights: dict[str, int] | None = None) -> dict[str, Any]:
    """A claim's priority range fields (none for the whole range: as older nodes expect),
    or its tier weights, checked as the node checks them (but for the tier names, which
    the cluster's table decides)."""
    if tier_weights is not None:
        if priorities is not None:
            raise ValueError("tier_weights cannot be given with priorities")
        return {"tier_weights": check_tier_weights(tier_weights)}
    if priorities is None:
        return {}
    lo, hi = priorities
    return {"priority_min": lo, "priority_max": hi}


def check_tier_weights(value: Any) -> dict[str, int]:
    """A claim's `tier_weights`: a non-empty dict of tier name -> integer weight in
    1..tier_weight_max (ValueError naming tier_weights otherwise)."""
    if not isinstance(value, dict) or not value:
        raise ValueError(f"tier_weights must be a non-empty dict of tier name -> weight, "
                         f"got {value!r}")
    for name, weight in value.items():
        if not isinstance(name, str) or not TIER_NAME.match(name):
            raise ValueError(f"tier_weights: {name!r} is not a tier name")
        if isinstance(weight, bool) or not isinstance(weight, int) \
                or not 1 <= weight <= TIER_WEIGHT_MAX:
            raise ValueError(f"tier_weights[{name!r}] must be an integer in "
                             f"1..{TIER_WEIGHT_MAX}, got {weight!r}")
    return dict(value)
