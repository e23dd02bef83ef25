"""The workload: producers, workers (honest, crashing, zombie), cancels, tenant caps, a
fencing sink and a per-second schedule, every client call recorded in the history. Half
the job workers send their completions on their next claim (`completions` of
`POST /v1/claims`), each recorded as its own `complete` operation.

Outcomes: a 2xx answer is `ok`; a 4xx answer is `fail` (the node refused, nothing
happened); a 5xx answer, a timeout or a connection error is `info` (it may have happened).
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import aiohttp

from .history import FAIL, INFO, OK, History
from .timefmt import to_ms

LEASE_S = 3                    # short, so expiries and zombies happen within a short run
CLAIM_WAIT_S = 1.0
REQUEST_TIMEOUT_S = 6.0
TENANT_CAPS = {"t1": 2, "t2": 3, "t3": 0}   # 0: unlimited
JOB_TYPE, CRON_TYPE = "job", "cron_tick"
# Workflows (DESIGN 5.2): a fan-out, a step after two of it, and a callback after all;
# their own task types and an uncapped tenant, so they neither take the job workers'
# tasks nor count against the caps the checker holds the jobs to.
STEP_TYPE, CALLBACK_TYPE, WORKFLOW_TENANT = "wf_step", "wf_cb", "t3"
WORKFLOW_EVERY_S = 1.5
SCHEDULE_ID, SCHEDULE_TENANT = "every-second", "t3"
SUBMIT_RETRIES = 3
FIRST_FIRE_WAIT_S = 5.0
SCHEDULE_READ_EVERY_S = 2.0      # a schedule keeps its last 20 fire records: 20 s at 1/s
FIRES_CATCH_UP_S = 30.0         # after healing: how long the leader gets to make the fires it owes
CAUGHT_UP_SLACK_MS = 1_000      # a next fire this far in the past still counts as caught up
FATES = (("ok", 80), ("fail", 6), ("crash", 6), ("zombie", 8))
HEARTBEAT_EVERY_S = 0.4


@dataclass
class Shared:
    """What the workload's processes learn from each other."""
    acked: list = field(default_factory=list)           # task ids of acknowledged submits
    acked_seq: dict = field(default_factory=dict)       # task id -> applied_seq of its ack
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    producing: asyncio.Event = field(default_factory=asyncio.Event)


class FencingSink:
    """A downstream ledger: takes a task's effect only with a token higher than any seen."""

    def __init__(self) -> None:
        self.highest: dict[str, int] = {}
        self.rejected = 0

    def write(self, task_id: str, token: int) -> bool:
        if token <= self.highest.get(task_id, -1):
            self.rejected += 1
            return False
        self.highest[task_id] = token
        return True


class Api:
    """HTTP calls to the nodes (through their proxies), each recorded as one operation."""

    def __init__(self, urls: dict[str, str], history: History, session: aiohttp.ClientSession):
        self.urls = urls
        self.history = history
        self.session = session

    async def call(self, process: str, f: str, node: str, method: str, path: str,
                   body=None, timeout_s: float = REQUEST_TIMEOUT_S, extract=None, **args):
        op = self.history.invoke(process, f, node, **args)
        kind, result, error, data = INFO, None, None, None
        try:
            async with self.session.request(method, self.urls[node] + path, json=body,
                                            timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
                data = await r.json(content_type=None)
                status = r.status
            if 200 <= status < 300:
                kind, result = OK, (extract(data) if extract else data)
            else:
                kind = FAIL if 400 <= status < 500 else INFO
                error = {"status": status, "code": (data or {}).get("error", {}).get("code")}
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError) as e:
            error = {"exception": type(e).__name__}
        self.history.complete(op, kind, process, f, node, result=result, error=error)
        return kind, data


def _task_view(t: dict) -> dict:
    keys = ("task_id", "tenant", "fencing_token", "lease_expires_at", "started_at", "attempt",
            "run_at", "state")
    return {k: t.get(k) for k in keys}


def _workflow_view(data: dict) -> dict:
    """A submitted workflow: its id and each step's [name, task id] (the deps are the
    operation's arguments, as submitted)."""
    return {"workflow_id": data.get("workflow_id"),
            "steps": [[s.get("name"), s.get("task_id")] for s in data.get("steps") or []]}


def _claim_view(data: dict) -> dict:
    return {"tasks": [_task_view(t) for t in data.get("tasks", [])]}


class Workload:
    def __init__(self, api: Api, rng: random.Random, nodes: list[str], *, producers: int = 4,
                 workers: int = 6, submit_interval_s: float = 0.8,
                 tenant_caps: dict[str, int] | None = None) -> None:
        self.api = api
        self.tenant_caps = dict(tenant_caps or TENANT_CAPS)
        self.rng = rng
        self.nodes = nodes
        self.n_producers = producers
        self.n_workers = workers
        self.submit_interval_s = submit_interval_s
        self.shared = Shared()
        self.sink = FencingSink()
        self.schedule_enabled = False
        self._schedule_stopped = False
        self._tasks: list[asyncio.Task] = []

    def node(self) -> str:
        return self.rng.choice(self.nodes)

    # --- setup and teardown --------------------------------------------------------------

    async def setup(self, deadline_s: float = 30.0) -> None:
        """Tenant caps (and the schedule when the node serves it) before any fault."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        for tenant, cap in self.tenant_caps.items():
            while True:
                kind, _ = await self.api.call("setup", "set_tenant", self.node(), "PUT",
                                              f"/v1/tenants/{tenant}",
                                              {"max_running": cap, "weight": 1},
                                              tenant=tenant, max_running=cap)
                if kind == OK:
                    break
                if loop.time() > end:
                    raise RuntimeError(f"could not set tenant {tenant}")
                await asyncio.sleep(0.2)
        await self._put_schedule(end)

    async def _put_schedule(self, end: float) -> None:
        body = {"cron": "* * * * * *", "timezone": "UTC", "tenant": SCHEDULE_TENANT,
                "task": {"task_type": CRON_TYPE, "max_retries": 5},
                "misfire": "run_all", "overlap": "allow"}
        loop = asyncio.get_running_loop()
        while loop.time() < end:
            kind, data = await self.api.call(
                "setup", "put_schedule", self.node(), "PUT", f"/v1/schedules/{SCHEDULE_ID}",
                body, tenant=SCHEDULE_TENANT, schedule_id=SCHEDULE_ID, every_ms=1000,
                extract=lambda d: {"next_fire_at": d.get("next_fire_at")})
            if kind == OK:
                self.schedule_enabled = True
                break
            if kind == FAIL and (data or {}).get("error", {}).get("code") in (
                    "not_found", "method_not_allowed"):
                return      # this build has no schedules API: run without fires
            await asyncio.sleep(0.2)
        if self.schedule_enabled and not await self._fires_seen(FIRST_FIRE_WAIT_S):
            # the API takes schedules but nothing fires them yet: say so, check no fires
            await self.stop_schedule()
            self.api.history.event("setup", "schedule_unsupported", "note",
                                   tenant=SCHEDULE_TENANT, schedule_id=SCHEDULE_ID)
            self.schedule_enabled = self._schedule_stopped = False

    async def _fires_seen(self, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while loop.time() < end:
            url = self.api.urls[self.node()]
            try:
                async with self.api.session.get(
                        f"{url}/v1/schedules/{SCHEDULE_ID}?tenant={SCHEDULE_TENANT}",
                        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)) as r:
                    data = await r.json(content_type=None)
                if r.status == 200 and data.get("fires"):
                    return True
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError):
                pass
            await asyncio.sleep(0.2)
        return False

    async def read_schedule(self) -> None:
        """Record the schedule's recent fire records (fire time -> task); a retried
        occurrence's run_at moves, so these are what tie a task to its fire time."""
        if self.schedule_enabled or self._schedule_stopped:
            await self.api.call(
                "s0", "read_schedule", self.node(), "GET",
                f"/v1/schedules/{SCHEDULE_ID}?tenant={SCHEDULE_TENANT}", None,
                extract=lambda d: {"fires": d.get("fires", [])},
                tenant=SCHEDULE_TENANT, schedule_id=SCHEDULE_ID)

    async def _schedule_reader(self) -> None:
        while not self.shared.stopping.is_set():
            await asyncio.sleep(SCHEDULE_READ_EVERY_S)
            await self.read_schedule()

    async def fires_caught_up(self, timeout_s: float = FIRES_CATCH_UP_S) -> bool:
        """Wait, bounded, until the schedule's next fire is no longer in the past: the
        leader has made every fire due by now. Right after healing, a new leader may still
        be making the fires it owes for the time the group had none (misfire `run_all`);
        a stop that lands first turns those into fires that are never made, which is the
        stop's doing, not a loss. Past the bound the stop goes ahead and the checker
        reports whatever is missing."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            kind, data = await self.api.call(
                "s0", "read_schedule", self.node(), "GET",
                f"/v1/schedules/{SCHEDULE_ID}?tenant={SCHEDULE_TENANT}", None,
                extract=lambda d: {"fires": d.get("fires", [])},
                tenant=SCHEDULE_TENANT, schedule_id=SCHEDULE_ID)
            next_ms = to_ms((data or {}).get("next_fire_at")) if kind == OK else None
            if next_ms is not None and next_ms >= time.time() * 1000 - CAUGHT_UP_SLACK_MS:
                return True
            await asyncio.sleep(0.2)
        return False

    async def stop_schedule(self) -> None:
        if self.schedule_enabled:
            await self.fires_caught_up()
        for _ in range(50):
            if not self.schedule_enabled:
                return
            kind, _ = await self.api.call(
                "setup", "stop_schedule", self.node(), "POST",
                f"/v1/schedules/{SCHEDULE_ID}/pause?tenant={SCHEDULE_TENANT}", None,
                tenant=SCHEDULE_TENANT, schedule_id=SCHEDULE_ID)
            if kind == OK:
                self._schedule_stopped = True
                return
            await asyncio.sleep(0.2)

    def start(self) -> None:
        self.shared.producing.set()
        spawn = asyncio.ensure_future
        self._tasks += [spawn(self._producer(i)) for i in range(self.n_producers)]
        self._tasks += [spawn(self._worker(f"w{i}", JOB_TYPE, carries=i % 2 == 1))
                        for i in range(self.n_workers)]
        self._tasks += [spawn(self._worker("cron", CRON_TYPE, honest=True)),
                        spawn(self._canceller())]
        self._tasks += [spawn(self._workflow_producer()), spawn(self._replayer()),
                        spawn(self._worker("wfs0", STEP_TYPE)),
                        spawn(self._worker("wfs1", STEP_TYPE, carries=True)),
                        spawn(self._worker("wfcb", CALLBACK_TYPE))]
        if self.schedule_enabled:
            self._tasks.append(spawn(self._schedule_reader()))

    def stop_producing(self) -> None:
        self.shared.producing.clear()

    async def stop(self) -> None:
        self.shared.stopping.set()
        self.shared.producing.clear()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # --- producers ------------------------------------------------------------------------

    async def _producer(self, i: int) -> None:
        n = 0
        while self.shared.producing.is_set():
            n += 1
            key = f"p{i}-{n}"
            body = {"task_type": JOB_TYPE, "tenant": self.rng.choice(list(self.tenant_caps)),
                    "payload": {"n": n}, "idempotency_key": key, "max_retries": 5,
                    "retry": {"backoff": "fixed", "base_s": 0.5}}
            if self.rng.random() < 0.2:
                body["delay_s"] = self.rng.choice([1, 2, 3])
            for _ in range(SUBMIT_RETRIES):
                kind, data = await self.api.call(
                    f"p{i}", "submit", self.node(), "POST", "/v1/tasks", body,
                    extract=lambda d: {"task_id": d.get("task_id"), "duplicate": d.get("duplicate"),
                                       "applied_seq": d.get("applied_seq")},
                    idempotency_key=key, tenant=body["tenant"])
                if kind == OK:
                    self.shared.acked.append(data["task_id"])
                    self.shared.acked_seq[data["task_id"]] = data.get("applied_seq") or 0
                if kind != INFO:
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(self.submit_interval_s)

    async def _workflow_producer(self) -> None:
        """A workflow every WORKFLOW_EVERY_S: steps a, b, c; d after a and b ("run" every
        other time: it runs even when a parent dead-letters); a callback after all four.
        The answer's step task ids let the checker hold each step to its parents."""
        n = 0
        while self.shared.producing.is_set():
            n += 1
            key = f"wf-{n}"
            # every third workflow's first steps dead-letter at their first failure: the
            # replayer then replays them, and the steps they cancelled resume
            steps = [{"name": x, "task_type": STEP_TYPE, "max_retries": 0 if n % 3 == 0 else 3,
                      "retry": {"backoff": "fixed", "base_s": 0.5}} for x in "abc"]
            steps.append({"name": "d", "task_type": STEP_TYPE, "deps": ["a", "b"],
                          "on_parent_failure": "run" if n % 2 else "cancel"})
            steps.append({"name": "cb", "task_type": CALLBACK_TYPE, "max_retries": 5,
                          "deps": ["a", "b", "c", "d"]})
            body = {"tenant": WORKFLOW_TENANT, "idempotency_key": key, "steps": steps}
            for _ in range(SUBMIT_RETRIES):
                kind, _ = await self.api.call(
                    "wf0", "submit_workflow", self.node(), "POST", "/v1/workflows", body,
                    extract=_workflow_view, idempotency_key=key,
                    deps={x["name"]: x.get("deps", []) for x in steps},
                    run_steps=[x["name"] for x in steps
                               if x.get("on_parent_failure") == "run"])
                if kind != INFO:
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(WORKFLOW_EVERY_S)

    async def _replayer(self) -> None:
        """Replays the workflows' dead-lettered steps now and then (DESIGN 5.2: the steps
        their failure cancelled resume, and run after them)."""
        while not self.shared.stopping.is_set():
            await asyncio.sleep(1.0)
            if not self.shared.producing.is_set():
                continue
            kind, data = await self.api.call(
                "r0", "list_dead", self.node(), "GET",
                f"/v1/tasks?state=dead_letter&tenant={WORKFLOW_TENANT}&task_type={STEP_TYPE}"
                "&limit=5", None, extract=lambda d: {"n": len(d.get("tasks") or [])})
            for t in (data or {}).get("tasks") or [] if kind == OK else []:
                await self.api.call("r0", "replay", self.node(), "POST",
                                    f"/v1/tasks/{t['task_id']}/replay", None,
                                    extract=lambda d: {"state": d.get("state")},
                                    task_id=t["task_id"])

    async def _canceller(self) -> None:
        while not self.shared.stopping.is_set():
            await asyncio.sleep(0.5)
            if not self.shared.producing.is_set() or not self.shared.acked:
                continue
            task_id = self.rng.choice(self.shared.acked[-50:])
            await self.api.call("c0", "cancel", self.node(), "POST",
                                f"/v1/tasks/{task_id}/cancel", None,
                                extract=lambda d: {"state": d.get("state")}, task_id=task_id)

    # --- workers ----------------------------------------------------------------------------

    async def _worker(self, name: str, task_type: str, honest: bool = False,
                      carries: bool = False) -> None:
        incarnation = 0
        carried: list | None = [] if carries else None   # [task_id, token, body, tries]
        while not self.shared.stopping.is_set():
            worker_id = f"{name}.{incarnation}"
            node = self.node()
            body = {"worker_id": worker_id, "task_types": [task_type], "max_tasks": 1,
                    "wait_s": CLAIM_WAIT_S, "lease_s": LEASE_S}
            ops = self._invoke_carried(worker_id, node, carried, body)
            kind, data = await self.api.call(
                worker_id, "claim", node, "POST", "/v1/claims", body,
                timeout_s=REQUEST_TIMEOUT_S + CLAIM_WAIT_S, extract=_claim_view,
                task_types=[task_type])
            if ops:
                carried[:] = self._carried_outcomes(worker_id, node, carried, ops, kind, data)
            if kind != OK:
                await asyncio.sleep(0.1)
                continue
            for t in data.get("tasks", []):
                fate = "ok" if honest else self._fate()
                await self._run(worker_id, t, fate, carried)
                if fate == "crash":
                    incarnation += 1      # a crashed worker comes back with a new id
                    break

    def _invoke_carried(self, worker_id: str, node: str, carried: list | None,
                        body: dict) -> list[int]:
        """Put the carried completions on the claim `body`; one history op each."""
        if not carried:
            return []
        body["completions"] = [{"task_id": tid, "fencing_token": tok, **item}
                               for tid, tok, item, _ in carried]
        return [self.api.history.invoke(worker_id, "complete", node, task_id=tid,
                                        fencing_token=tok) for tid, tok, _, _ in carried]

    def _carried_outcomes(self, worker_id: str, node: str, carried: list, ops: list[int],
                          kind: str, data) -> list:
        """Record each carried completion's outcome; those without an answer (the claim
        failed) are carried again, a few times at most."""
        answers = data.get("completions") if kind == OK and isinstance(data, dict) else None
        again = []
        for i, ((tid, tok, item, tries), op) in enumerate(zip(carried, ops)):
            answer = answers[i] if isinstance(answers, list) and i < len(answers) else None
            if answer is None:
                self.api.history.complete(op, FAIL if kind == FAIL else INFO, worker_id,
                                          "complete", node, error={"claim": kind})
                if tries + 1 < SUBMIT_RETRIES:
                    again.append([tid, tok, item, tries + 1])
            elif isinstance(answer.get("error"), dict):
                self.api.history.complete(op, FAIL, worker_id, "complete", node,
                                          error={"code": answer["error"].get("code")})
            else:
                self.api.history.complete(op, OK, worker_id, "complete", node,
                                          result={"state": answer.get("state")})
        return again

    def _fate(self) -> str:
        names, weights = zip(*FATES)
        return self.rng.choices(names, weights)[0]

    async def _run(self, worker_id: str, task: dict, fate: str,
                   carried: list | None = None) -> None:
        task_id, token = task["task_id"], task["fencing_token"]
        if fate == "crash":
            await asyncio.sleep(self.rng.uniform(0, 0.3))
            return
        if fate == "zombie":
            # paused past its lease (a GC pause, a stopped VM), then carries on as if nothing
            await asyncio.sleep(LEASE_S + self.rng.uniform(0.5, 1.5))
        else:
            cancelled = await self._work(worker_id, task_id, token)
            if cancelled:
                await self._finish(worker_id, task_id, token, "fail",
                                   {"error": "cancelled", "retryable": False})
                return
        if fate == "fail":
            await self._finish(worker_id, task_id, token, "fail",
                               {"error": "boom", "retryable": True})
            return
        op = self.api.history.invoke(worker_id, "sink_write", None, task_id=task_id,
                                     fencing_token=token)
        accepted = self.sink.write(task_id, token)
        self.api.history.complete(op, OK, worker_id, "sink_write", result={"accepted": accepted})
        if carried is not None:      # sent on this worker's next claim
            carried.append([task_id, token, {"result": {"by": worker_id}}, 0])
            return
        await self._finish(worker_id, task_id, token, "complete", {"result": {"by": worker_id}})

    async def _work(self, worker_id: str, task_id: str, token: int) -> bool:
        """Work a little, heartbeating; True when the task was cancelled meanwhile."""
        remaining = self.rng.uniform(0.05, 1.0)
        while remaining > 0:
            step = min(remaining, HEARTBEAT_EVERY_S)
            await asyncio.sleep(step)
            remaining -= step
            if remaining <= 0:
                break
            kind, data = await self.api.call(
                worker_id, "heartbeat", self.node(), "POST", f"/v1/tasks/{task_id}/heartbeat",
                {"fencing_token": token, "lease_s": LEASE_S},
                extract=lambda d: {"lease_expires_at": d.get("lease_expires_at"),
                                   "cancel_requested": d.get("cancel_requested")},
                task_id=task_id, fencing_token=token)
            if kind == OK and data.get("cancel_requested"):
                return True
            if kind == FAIL:
                return False
        return False

    async def _finish(self, worker_id: str, task_id: str, token: int, f: str, body: dict):
        for _ in range(SUBMIT_RETRIES):
            kind, _ = await self.api.call(
                worker_id, f, self.node(), "POST", f"/v1/tasks/{task_id}/{f}",
                {"fencing_token": token, **body},
                extract=lambda d: {"state": d.get("state")}, task_id=task_id,
                fencing_token=token)
            if kind != INFO:
                return
            await asyncio.sleep(0.2)
