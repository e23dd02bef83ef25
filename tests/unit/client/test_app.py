"""App / AsyncApp: decorated functions run locally when called, submit their calls as
{"args", "kwargs"} payloads (refused here when not JSON or not fitting the signature), in
one request for submit_many, with per-call options; handles wait for results or raise;
the worker-side handler rebuilds the call with `ctx` and honours `retry_on`."""
from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from tsched.client import (ApiError, App, AsyncApp, NonRetryable, TaskCancelled, TaskContext,
                           TaskFailed)

from tests.unit.client.client_support import FakeNode, error


def ctx_of(task_id: str = "t1") -> TaskContext:
    return TaskContext(task_id=task_id, execution_id="e1", fencing_token=7, attempt=2,
                       task_type="x", tenant=None, run_at=None)


@pytest.fixture
def node():
    n = FakeNode()
    yield n
    n.close()


@pytest.fixture
def app(node):
    with App(node.url, timeout_s=2) as a:
        yield a


def test_a_task_is_named_after_its_module_and_runs_locally_when_called(app):
    @app.task
    def double(x: int) -> int:
        return 2 * x

    @app.task(name="custom")
    def other() -> None:
        pass

    assert double.name == f"{__name__}.test_a_task_is_named_after_its_module_and_runs_" \
                          "locally_when_called.<locals>.double"
    assert double(21) == 42
    assert set(app.tasks) == {double.name, "custom"}


def test_declaration_errors_are_raised_at_decoration(app):
    @app.task(name="twice")
    def one() -> None:
        pass
    with pytest.raises(ValueError, match="two tasks"):
        app.task(name="twice")(lambda: None)
    with pytest.raises(TypeError, match="delay_s"):
        app.task(lambda delay_s: None)
    with pytest.raises(TypeError, match="without arguments"):
        app.periodic("* * * * *")(lambda x: x)
    with pytest.raises(ValueError, match="1 to 128 characters"):
        app.task(name="x" * 129)(lambda: None)
    with pytest.raises(ValueError, match="1 to 128 characters"):
        app.periodic("* * * * *", id="s" * 129, name="p1")(lambda: None)
    with pytest.raises(ValueError, match="overlap"):
        app.periodic("* * * * *", overlap="never", name="p")(lambda: None)


def test_submit_sends_args_kwargs_and_the_options(app, node):
    node.json("POST", "/v1/tasks", 201, {"task_id": "a1", "state": "pending"})

    @app.task(priority=3, max_retries=5, timeout_s=60, tenant="acme")
    def send_email(to: str, subject: str = "hi") -> dict:
        return {}

    handle = send_email.submit("ada@example.com", subject="welcome", delay_s=10)
    assert handle.task_id == "a1" and not handle.duplicate
    body = node.requests("POST", "/v1/tasks")[0].body
    assert body == {"task_type": send_email.name, "tenant": "acme", "priority": 3,
                    "timeout_s": 60, "max_retries": 5, "delay_s": 10,
                    "payload": {"args": ["ada@example.com"], "kwargs": {"subject": "welcome"}}}
    send_email.using(priority=0, idempotency_key="k1").submit("b@example.com")
    body = node.requests("POST", "/v1/tasks")[1].body
    assert (body["priority"], body["idempotency_key"], "delay_s" in body) == (0, "k1", False)


def test_bad_arguments_are_refused_before_any_request(app, node):
    @app.task
    def f(x: int) -> int:
        return x
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        f.submit(object())
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        f.submit(float("nan"))
    with pytest.raises(TypeError, match="missing a required argument"):
        f.submit()
    with pytest.raises(TypeError, match="too many"):
        f.submit(1, 2)
    with pytest.raises(ValueError, match="idempotency_key"):
        f.using(idempotency_key="k").submit_many([([1], {})])
    assert node.seen == []


def test_submit_many_is_one_request_and_a_refused_entry_raises(app, node):
    @app.task(name="sq")
    def sq(x: int) -> int:
        return x * x
    node.json("POST", "/v1/tasks", 201, {"tasks": [{"task_id": "a"}, {"task_id": "b"}]})
    handles = sq.submit_many([([1], {}), ([], {"x": 2})])
    assert [h.task_id for h in handles] == ["a", "b"]
    [req] = node.requests("POST", "/v1/tasks")
    assert [t["payload"] for t in req.body["tasks"]] == [
        {"args": [1], "kwargs": {}}, {"args": [], "kwargs": {"x": 2}}]
    node.json("POST", "/v1/tasks", 201, {"tasks": [
        {"task_id": "a"}, {"error": {"code": "too_large", "message": "payload", "details": {}}}]})
    with pytest.raises(ApiError) as info:
        sq.submit_many([([1], {}), ([2], {})])
    assert info.value.code == "too_large" and info.value.details["submitted"] == ["a"]


def test_a_handle_polls_for_the_result_or_raises(app, node):
    @app.task(name="t")
    def t() -> None:
        pass
    node.json("POST", "/v1/tasks", 201, {"task_id": "a", "state": "pending"})
    states = iter(["pending", "running", "completed"])
    node.route("GET", "/v1/tasks/a", lambda r: (200, {"task_id": "a", "state": next(states),
                                                      "result": {"ok": 1}}))
    handle = t.submit()
    assert handle.result(timeout_s=10) == {"ok": 1}
    assert len(node.requests("GET", "/v1/tasks/a")) == 3

    node.json("GET", "/v1/tasks/a", 200, {"task_id": "a", "state": "dead_letter",
                                          "last_error": "ValueError('x')"})
    with pytest.raises(TaskFailed, match="dead_letter: ValueError") as failed:
        handle.result(timeout_s=10)
    assert not isinstance(failed.value, TaskCancelled)
    node.json("GET", "/v1/tasks/a", 200, {"task_id": "a", "state": "running"})
    assert handle.status() == "running"
    with pytest.raises(TimeoutError, match="still running"):
        handle.result(timeout_s=0.05)
    node.json("POST", "/v1/tasks/a/cancel", 200, {"task_id": "a", "state": "cancelled"})
    assert handle.cancel() == "cancelled"
    node.json("GET", "/v1/tasks/a", 200, {"task_id": "a", "state": "cancelled"})
    with pytest.raises(TaskCancelled):
        handle.result(timeout_s=10)


def test_the_worker_handler_rebuilds_the_call_with_ctx(app):
    seen = {}

    @app.task(name="with_ctx")
    def with_ctx(a: int, ctx: TaskContext, b: int = 0) -> int:
        seen["ctx"] = ctx
        return a + b

    @app.task(name="kw_ctx")
    def kw_ctx(*, ctx: TaskContext) -> int:
        return ctx.attempt

    handler = with_ctx.handler()
    ctx = ctx_of()
    assert handler({"args": [1], "kwargs": {"b": 2}}, ctx) == 3 and seen["ctx"] is ctx
    assert handler({"args": [1, 5], "kwargs": {}}, ctx) == 6
    assert kw_ctx.handler()(None, ctx) == 2
    with pytest.raises(NonRetryable, match="do not fit"):
        handler({"args": [], "kwargs": {}}, ctx)
    with pytest.raises(NonRetryable, match="payload must be"):
        handler({"to": "x"}, ctx)


def test_retry_on_limits_which_exceptions_are_retried(app):
    @app.task(name="flaky", retry_on=(ConnectionError,))
    def flaky(kind: str) -> None:
        raise ConnectionError("down") if kind == "net" else ValueError("bad")

    @app.task(name="plain")
    def plain() -> None:
        raise ValueError("bad")

    with pytest.raises(ConnectionError):
        flaky.handler()({"args": ["net"]}, ctx_of())
    with pytest.raises(NonRetryable, match="ValueError"):
        flaky.handler()({"args": ["other"]}, ctx_of())
    with pytest.raises(ValueError):
        plain.handler()(None, ctx_of())


def test_periodic_declares_a_schedule_with_explicit_defaults(app):
    @app.periodic("*/5 * * * * *", id="tick", overlap="skip", timezone="Europe/Berlin",
                  priority=2)
    def tick(ctx: TaskContext) -> None:
        pass
    p = app.periodics["tick"]
    assert (p.task_type, p.cron, p.timezone, p.overlap, p.misfire) == (
        tick.name, "*/5 * * * * *", "Europe/Berlin", "skip", "run_all")
    assert p.template == {"priority": 2, "timeout_s": 300, "max_retries": 3}
    assert tick.handler()(None, ctx_of("s-1")) is None


def test_configure_only_before_the_first_call(app, node):
    app.configure(urls=node.url, token="tok")
    assert app.client.token == "tok"
    with pytest.raises(RuntimeError):
        app.configure(token="other")


async def test_async_app_submits_with_await_and_runs_async_handlers(node):
    node.json("POST", "/v1/tasks", 201, {"task_id": "z", "state": "pending"})
    node.json("GET", "/v1/tasks/z", 200, {"task_id": "z", "state": "completed", "result": 9})
    async with AsyncApp(node.url, timeout_s=2) as app:
        @app.task(name="asq")
        async def asq(x: int, ctx: TaskContext) -> int:
            await asyncio.sleep(0)
            return x * x

        handle = await asq.submit(3)
        assert await handle.result(timeout_s=5) == 9
        assert node.requests("POST", "/v1/tasks")[0].body["payload"] == {"args": [3],
                                                                          "kwargs": {}}
        assert await asq.handler()({"args": [4]}, ctx_of()) == 16
        assert await asq(5, ctx_of()) == 25


def test_time_options_travel_as_rfc3339(app, node):
    node.json("POST", "/v1/tasks", 201, {"task_id": "a"})

    @app.task(name="later")
    def later() -> None:
        pass
    when = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    later.using(run_at=when).submit()
    assert node.requests("POST", "/v1/tasks")[0].body["run_at"] == "2030-01-02T03:04:05Z"


def test_an_api_error_of_submit_reaches_the_caller(app, node):
    node.route("POST", "/v1/tasks", lambda r: error("invalid_argument", "priority", 400))

    @app.task(name="bad")
    def bad() -> None:
        pass
    with pytest.raises(ApiError, match="invalid_argument"):
        bad.submit()


def test_a_handle_from_a_stored_id_reads_the_task_as_submit_s_does(app, node):
    """`app.handle(task_id)`, Celery's `AsyncResult(task_id)`: nothing is asked until used;
    an id the cluster does not know raises its not_found."""
    node.json("GET", "/v1/tasks/a", 200, {"task_id": "a", "state": "completed", "result": 4})
    node.route("GET", "/v1/tasks/nope", lambda r: error("not_found", "no task nope", 404))
    handle = app.handle("a")
    assert handle.task_id == "a" and node.seen == []
    assert handle.result(timeout_s=10) == 4 and handle.status() == "completed"
    with pytest.raises(ApiError, match="not_found"):
        app.handle("nope").result(timeout_s=10)
    with pytest.raises(TypeError, match="task id"):
        app.handle("")


async def test_an_async_app_s_handle_from_a_stored_id(node):
    node.json("GET", "/v1/tasks/a", 200, {"task_id": "a", "state": "dead_letter",
                                          "last_error": "KeyError('x')"})
    async with AsyncApp(node.url, timeout_s=2) as app:
        with pytest.raises(TaskFailed, match="KeyError"):
            await app.handle("a").result(timeout_s=10)
