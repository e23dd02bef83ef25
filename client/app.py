"""`App` and `AsyncApp`: tasks as decorated Python functions (the Celery / Dramatiq / arq
way), built on `Client` / `AsyncClient` and run by `tsworker` (a `Worker`).

    app = App("http://127.0.0.1:8701,http://127.0.0.1:8702,http://127.0.0.1:8703")
    # or App(): the URLs from TSCTL_URL, the token from TSCTL_TOKEN (as tsctl)

    @app.task(max_retries=5, priority=3, timeout_s=60, retry_on=(ConnectionError,))
    def send_email(to: str, subject: str = "hi") -> dict: ...

    @app.periodic("0 2 * * *", timezone="Europe/Berlin", id="nightly-interest")
    def nightly_interest(ctx: TaskContext) -> None: ...

    handle = send_email.submit("ada@example.com", subject="welcome", delay_s=10)
    handle.result(timeout_s=30)     # {"sent_to": ...}, or raises TaskFailed
    app.handle(handle.task_id)      # a handle again from a stored id (Celery's AsyncResult)

A task's type is its name (default `module.function`); a call's arguments are its payload
`{"args": [...], "kwargs": {...}}`. Calling a decorated function runs it here, as is.
`AsyncApp` is the same with `await fn.submit(...)` over the AsyncClient.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, ParamSpec, TypedDict, TypeVar, Unpack, overload

from ._claiming import check_priorities
from ._reserve import check_reserve
from ._core import CA_FILE_ENV, DEFAULT_URLS, TOKEN_ENV, URL_ENV, env_or, parse_urls
from .app_task import AnyTask, AsyncTask, Options, Periodic, Task, Time
from .canvas import AsyncWorkflowHandle, Signature, WorkflowHandle, batch_steps
from .client import AsyncClient, Client
from .handles import AsyncTaskHandle, TaskHandle
from .cron_check import CronError, check_cron

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T", bound=AnyTask)
OVERLAPS = ("allow", "skip", "buffer_one")       # DESIGN.md section 5, Schedules
MISFIRES = ("run_all", "run_once", "skip")
# What a schedule's task gets when the task declares nothing (the cluster's defaults).
TEMPLATE_DEFAULTS: dict[str, Any] = {"priority": 5, "timeout_s": 300, "max_retries": 3}
TEMPLATE_FIELDS = ("priority", "timeout_s", "max_retries", "retry")
NAME_CHARS_MAX = 128   # the API's bound on a task type and a schedule id


class TaskOptions(TypedDict, total=False):
    """`@app.task(...)`: the name (default `module.function`), the submit fields, and
    `retry_on`, the only exceptions retried (default: every exception but NonRetryable)."""
    name: str
    tenant: str
    priority: int
    timeout_s: float
    max_retries: int
    retry: dict[str, Any]
    retry_on: tuple[type[BaseException], ...]
    limits: Iterable[str]


class PeriodicOptions(TaskOptions, total=False):
    """`@app.periodic(cron, ...)`: the task's options and the schedule's (`id` default: the
    task's name; the others default as the cluster does, DESIGN.md section 5)."""
    timezone: str
    id: str
    overlap: str
    misfire: str
    catchup_window_s: float
    jitter_s: float
    start_at: Time
    end_at: Time


def _check_name(name: str, what: str) -> None:
    """Refused here rather than by the cluster at the first submit or at tsworker's start."""
    if not name or len(name) > NAME_CHARS_MAX:
        raise ValueError(f"a {what} has 1 to {NAME_CHARS_MAX} characters: {name[:40]!r}...")


def _task_id(task_id: str) -> str:
    """A task id as a handle takes it: a non-empty string (the cluster checks the rest)."""
    if not isinstance(task_id, str) or not task_id:
        raise TypeError(f"a task id is a non-empty string, not {task_id!r}")
    return task_id


class _AppBase:
    """The registry of tasks and schedules, shared by both apps. What is not given comes
    from the environment, as for tsctl: `urls` from TSCTL_URL (else the local cluster of
    `tsctl dev`), `token` from TSCTL_TOKEN, `ca_file` from TSCTL_CA_FILE."""

    def __init__(self, urls: str | Iterable[str] | None = None, *, token: str | None = None,
                 tenant: str | None = None, timeout_s: float = 30.0,
                 ca_file: str | None = None,
                 priorities: tuple[int, int] | str | None = None,
                 reserve: Mapping[str, float | str] | str | Iterable[str] | None = None
                 ) -> None:
        self.urls = parse_urls(urls if urls is not None
                               else env_or(None, URL_ENV) or DEFAULT_URLS)
        self.token, self.tenant, self.timeout_s = env_or(token, TOKEN_ENV), tenant, timeout_s
        self.ca_file = env_or(ca_file, CA_FILE_ENV)
        # the effective priorities its workers claim (tsworker --priorities overrides)
        self.priorities = check_priorities(priorities)
        # slots its workers reserve per tier (DESIGN 5.1; tsworker --reserve overrides)
        self.reserve = check_reserve(reserve)
        self.tasks: dict[str, AnyTask] = {}
        self.periodics: dict[str, Periodic] = {}
        self.limits: dict[str, dict[str, Any]] = {}   # keyed limits tsworker puts
        self._made_client = False

    def configure(self, urls: str | Iterable[str] | None = None,
                  token: str | None = None, ca_file: str | None = None) -> None:
        """Point the app at other nodes, another token or CA bundle (tsworker's --url,
        --token, --ca-file); only before its first call."""
        if self._made_client:
            raise RuntimeError("configure() comes before the app's first call")
        if urls is not None:
            self.urls = parse_urls(urls)
        if token is not None:
            self.token = token
        if ca_file is not None:
            self.ca_file = ca_file

    def _identity(self, fn: Callable[..., Any],
                  kw: TaskOptions) -> tuple[str, Options, tuple[type[BaseException], ...] | None]:
        """A new task's name, options and retry_on; its name must be new."""
        name = kw.get("name") or f"{fn.__module__}.{fn.__qualname__}"
        _check_name(name, "task name")
        if name in self.tasks:
            raise ValueError(f"two tasks are named {name!r}: give one a name=")
        limits = kw.get("limits")
        if isinstance(limits, str):
            raise TypeError(f"task {name}: limits is a list of limit names, not a string")
        options = Options(tenant=kw.get("tenant") or self.tenant, priority=kw.get("priority"),
                          timeout_s=kw.get("timeout_s"), max_retries=kw.get("max_retries"),
                          retry=kw.get("retry"),
                          limits=tuple(limits) if limits is not None else None)
        return name, options, kw.get("retry_on")

    def limit(self, name: str, *, rate: int | None = None, per_s: float | None = None,
              concurrency: int | None = None, partition_by: str | None = None) -> None:
        """Declare a keyed limit that `tsworker` puts when it starts (as it puts schedules):
        at most `rate` claims in any window of `per_s` seconds (default 1) and/or
        `concurrency` running at once, per value of `partition_by` ("tenant" or a top-level
        payload field). Tasks name it: `@app.task(limits=[name])`."""
        _check_name(name, "limit name")
        if not rate and not concurrency:
            raise ValueError(f"limit {name}: give rate (and per_s) or concurrency, or both")
        if per_s is not None and not rate:
            raise ValueError(f"limit {name}: per_s needs rate")
        if name in self.limits:
            raise ValueError(f"two limits are named {name!r}")
        fields = {"rate": rate, "per_s": per_s if rate and per_s is not None else
                  (1 if rate else None), "concurrency": concurrency,
                  "partition_by": partition_by}
        self.limits[name] = fields

    def _register(self, task: T) -> T:
        self.tasks[task.name] = task
        return task

    def _schedule(self, task: AnyTask, cron: str, kw: PeriodicOptions) -> None:
        try:
            task.signature.check([], {})
        except TypeError:
            raise TypeError(f"periodic task {task.name}: its schedule calls it without "
                            "arguments; give every parameter but ctx a default") from None
        overlap, misfire = kw.get("overlap", "allow"), kw.get("misfire", "run_all")
        if overlap not in OVERLAPS or misfire not in MISFIRES:
            raise ValueError(f"overlap is one of {OVERLAPS}, misfire one of {MISFIRES}")
        sid = kw.get("id") or task.name
        _check_name(sid, "schedule id")
        try:
            check_cron(cron, kw.get("timezone", "UTC"))
        except CronError as exc:
            raise CronError(f"periodic task {task.name}, schedule {sid!r}: {exc}") from None
        if sid in self.periodics:
            raise ValueError(f"two periodic tasks use the schedule id {sid!r}")
        declared = task.options.fields()
        template = {**TEMPLATE_DEFAULTS,
                    **{k: declared[k] for k in TEMPLATE_FIELDS if k in declared}}
        self.periodics[sid] = Periodic(
            schedule_id=sid, task_type=task.name, cron=cron,
            timezone=kw.get("timezone", "UTC"), tenant=task.options.tenant, overlap=overlap,
            misfire=misfire, catchup_window_s=kw.get("catchup_window_s", 60),
            jitter_s=kw.get("jitter_s", 0), start_at=kw.get("start_at"),
            end_at=kw.get("end_at"), template=template)


class App(_AppBase):
    """Tasks submitted with the synchronous `Client`."""

    _client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._made_client = True
            self._client = Client(self.urls, token=self.token, timeout_s=self.timeout_s,
                                  ca_file=self.ca_file)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def handle(self, task_id: str) -> TaskHandle:
        """The handle of a task submitted earlier, by its id (Celery's
        `AsyncResult(task_id)`): `result()`, `status()`, `cancel()`, `refresh()`. An id the
        cluster does not know raises ApiError `not_found` at the first call."""
        return TaskHandle(self.client, {"task_id": _task_id(task_id)})

    def batch(self, tasks: Iterable[Signature], then: Signature | None = None
              ) -> WorkflowHandle:
        """Submit a fan-out of steps and, with `then`, one callback that runs once, after
        every one of them completed, in one workflow (DESIGN 5.2). The callback reads their
        results from `ctx.parents`. `get()` returns its result (without `then`: the list
        of results)."""
        handle: WorkflowHandle = batch_steps(tasks, then).apply_async()
        return handle

    def submit_workflow(self, steps: list[dict[str, Any]], tails: list[str], *,
                        single: bool = True, tenant: str | None = None,
                        idempotency_key: str | None = None) -> WorkflowHandle:
        """Submit steps as the API takes them (canvas.py builds them); `tails`: the
        steps whose results `get()` returns."""
        wf = self.client.submit_workflow(steps, tenant=tenant or self.tenant,
                                         idempotency_key=idempotency_key)
        return WorkflowHandle(self.client, wf, tails, single)

    def __enter__(self) -> "App":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(self, /, **kw: Unpack[TaskOptions]) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(self, fn: Callable[..., Any] | None = None, /,
             **kw: Unpack[TaskOptions]) -> Any:
        """Declare a task: `@app.task` or `@app.task(name=..., priority=..., ...)`."""
        def decorate(f: Callable[P, R]) -> Task[P, R]:
            return self._register(Task(self, f, *self._identity(f, kw)))
        return decorate if fn is None else decorate(fn)

    def periodic(self, cron: str, /,
                 **kw: Unpack[PeriodicOptions]) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Declare a task that a cron schedule fires; `tsworker` puts the schedule."""
        def decorate(f: Callable[P, R]) -> Task[P, R]:
            task = self._register(Task(self, f, *self._identity(f, kw)))
            self._schedule(task, cron, kw)
            return task
        return decorate


class AsyncApp(_AppBase):
    """Tasks submitted with the `AsyncClient`: `await fn.submit(...)`."""

    _client: AsyncClient | None = None

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            self._made_client = True
            self._client = AsyncClient(self.urls, token=self.token, timeout_s=self.timeout_s,
                                       ca_file=self.ca_file)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    def handle(self, task_id: str) -> AsyncTaskHandle:
        """As `App.handle`: `await app.handle(task_id).result()`."""
        return AsyncTaskHandle(self.client, {"task_id": _task_id(task_id)})

    async def batch(self, tasks: Iterable[Signature], then: Signature | None = None
                    ) -> AsyncWorkflowHandle:
        """As `App.batch`, awaited."""
        handle: AsyncWorkflowHandle = await batch_steps(tasks, then).apply_async()
        return handle

    async def submit_workflow(self, steps: list[dict[str, Any]], tails: list[str], *,
                              single: bool = True, tenant: str | None = None,
                              idempotency_key: str | None = None) -> AsyncWorkflowHandle:
        wf = await self.client.submit_workflow(steps, tenant=tenant or self.tenant,
                                               idempotency_key=idempotency_key)
        return AsyncWorkflowHandle(self.client, wf, tails, single)

    async def __aenter__(self) -> "AsyncApp":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @overload
    def task(self, fn: Callable[P, R], /) -> AsyncTask[P, R]: ...

    @overload
    def task(self, /, **kw: Unpack[TaskOptions]) -> Callable[[Callable[P, R]], AsyncTask[P, R]]: ...

    def task(self, fn: Callable[..., Any] | None = None, /,
             **kw: Unpack[TaskOptions]) -> Any:
        """Declare a task, as `App.task` does."""
        def decorate(f: Callable[P, R]) -> AsyncTask[P, R]:
            return self._register(AsyncTask(self, f, *self._identity(f, kw)))
        return decorate if fn is None else decorate(fn)

    def periodic(self, cron: str, /, **kw: Unpack[PeriodicOptions]
                 ) -> Callable[[Callable[P, R]], AsyncTask[P, R]]:
        """Declare a task that a cron schedule fires, as `App.periodic` does."""
        def decorate(f: Callable[P, R]) -> AsyncTask[P, R]:
            task = self._register(AsyncTask(self, f, *self._identity(f, kw)))
            self._schedule(task, cron, kw)
            return task
        return decorate
