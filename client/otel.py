"""OpenTelemetry for producers and workers: the `otel` extra (`pip install tsched[otel]`).

With the extra's packages (opentelemetry-api; an application also installs and configures
opentelemetry-sdk and an exporter), the client:

- records the submitter's W3C trace context with each task it submits (`traceparent`, taken
  by the globally configured propagator, `opentelemetry.propagate.inject`, from the span
  that is current when `submit`, `submit_many`, `submit_workflow` or a canvas's
  `apply_async` is called); the cluster keeps it with the task and hands it back with each
  claim (DESIGN 12); a workflow's steps (up to STEP_SPANS_MAX) each get a `create` span
  of their own, child of that span and linked to their parent steps' (`with_step_contexts`);
- runs each claimed task's handler in a span of kind CONSUMER named `process <task type>`,
  whose parent is that context: every attempt (a retry included) is a span of the
  submitter's trace. Its attributes follow OpenTelemetry's messaging semantic conventions
  (`messaging.system` "tsched", `messaging.operation.type` / `.name` "process",
  `messaging.destination.name` the task type, `messaging.message.id` the task id,
  `messaging.client.id` the worker) and add `tsched.task.attempt` and `tsched.tenant`;
  a handler's exception is recorded on it and sets its status to error. While no tracer
  provider is set, a task without a submitter's context runs its handler without that
  span (it would record nothing and carry nothing: `traced`).

Without the packages nothing changes: this module imports none of OpenTelemetry until a
task is submitted or run, and then only when the package can be found (`available`), so
`import tsched.client` never imports it. The names follow the conventions' current
release (messaging spans, semconv 1.26+).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable

SYSTEM = "tsched"            # messaging.system
OPERATION = "process"        # messaging.operation.type and .name of a handler's run
TRACEPARENT = "traceparent"  # the W3C header (and the task's field) that carries it
_INSTRUMENTATION = "tsched.client"
STEP_SPANS_MAX = 1_000       # a workflow's steps that get a span of their own (see below)
_found: bool | None = None
_api: Any = None             # (propagate, trace, SpanKind) once imported
# The handler spans' tracer, got once: `get_tracer` reads the environment and makes a new
# (proxy) tracer per call, which was a twentieth of a Worker's loop per task with fast
# handlers. A proxy tracer follows the provider set later, so keeping one is safe.
_tracer: Any = None
# A tracer provider was set (the SDK's): from then on every handler runs in a span.
_configured = False


def available() -> bool:
    """Whether opentelemetry-api is installed: looked up once, and nothing imported (a
    submodule's spec would import its package; the top level's imports nothing)."""
    global _found
    if _found is None:
        try:
            spec = importlib.util.find_spec("opentelemetry")
        except (ImportError, ValueError):   # sys.modules says it is not there
            spec = None
        places = (spec.submodule_search_locations or ()) if spec is not None else ()
        _found = any((Path(place) / "trace").is_dir() for place in places)
    return _found


def _otel() -> Any:
    global _api
    if _api is None:
        from opentelemetry import propagate, trace
        from opentelemetry.trace import SpanKind
        _api = (propagate, trace, SpanKind)
    return _api


def current_traceparent() -> str | None:
    """The current span's context as a W3C traceparent (None: no extra, no span, or a
    propagator that writes none)."""
    if not available():
        return None
    propagate = _otel()[0]
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get(TRACEPARENT)


def with_traceparent(body: dict[str, Any]) -> dict[str, Any]:
    """`body` (a submit's) with the current trace context, unless it names one itself."""
    if TRACEPARENT not in body:
        traceparent = current_traceparent()
        if traceparent is not None:
            body[TRACEPARENT] = traceparent
    return body


def with_step_contexts(body: dict[str, Any]) -> dict[str, Any]:
    """A workflow submit's `body` with the current trace context and, for a workflow of at
    most STEP_SPANS_MAX steps, a `create <task type>` span (kind PRODUCER) per step, each
    linked to its parent steps' and recorded as that step's own trace context: a step's
    `process` span is a child of its `create` span, and the links show the graph. A larger
    workflow's steps all get the workflow's (a context per step would take ~70 bytes of the
    request's and the log entry's bound per step)."""
    with_traceparent(body)
    steps = body.get("steps")
    if TRACEPARENT not in body or not isinstance(steps, list) \
            or len(steps) > STEP_SPANS_MAX:
        return body
    # copies: the caller's step dicts are left as they were
    steps = body["steps"] = [dict(s) if isinstance(s, dict) else s for s in steps]
    propagate, trace, kind = _otel()
    tracer = trace.get_tracer(_INSTRUMENTATION)
    made: dict[Any, Any] = {}   # step name -> its create span's context
    for step in _parents_first(steps):
        links = [trace.Link(made[d]) for d in step.get("deps") or () if d in made]
        span = tracer.start_span(f"create {step.get('task_type')}", kind=kind.PRODUCER,
                                 links=links, attributes={
                                     "messaging.system": SYSTEM,
                                     "messaging.operation.type": "create",
                                     "messaging.operation.name": "create",
                                     "messaging.destination.name": step.get("task_type") or "",
                                     "tsched.step": step.get("name") or ""})
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        span.end()
        made[step.get("name")] = span.get_span_context()
        if TRACEPARENT in carrier:
            step.setdefault(TRACEPARENT, carrier[TRACEPARENT])
    return body


def _parents_first(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps with every step after its parents (Kahn's order; a step in a cycle or with
    an unknown parent comes last, for the cluster to refuse the graph)."""
    by_name = {s.get("name"): s for s in steps if isinstance(s, dict)}
    waiting = {name: len([d for d in s.get("deps") or () if d in by_name])
               for name, s in by_name.items()}
    children: dict[Any, list] = {}
    for name, s in by_name.items():
        for d in s.get("deps") or ():
            children.setdefault(d, []).append(name)
    ready = [name for name, n in waiting.items() if n == 0]
    order = []
    while ready:
        name = ready.pop()
        order.append(by_name[name])
        for child in children.get(name, ()):
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    done = {id(s) for s in order}
    return order + [s for s in by_name.values() if id(s) not in done]


def _span_args(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A handler span's parent context and its attributes, from the claimed task."""
    propagate, trace, kind = _otel()
    traceparent = task.get(TRACEPARENT)
    parent = propagate.extract({TRACEPARENT: traceparent}) if traceparent else None
    task_type = task.get("task_type") or ""
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": OPERATION,
        "messaging.operation.name": OPERATION,
        "messaging.destination.name": task_type,
        "messaging.message.id": task.get("task_id") or "",
        "tsched.task.attempt": int(task.get("attempt") or 1),
    }
    if task.get("tenant"):
        attributes["tsched.tenant"] = task["tenant"]
    if task.get("worker_id"):
        attributes["messaging.client.id"] = task["worker_id"]
    return f"{OPERATION} {task_type}", {"context": parent, "kind": kind.CONSUMER,
                                        "attributes": attributes}


def provider_set() -> bool:
    """Whether a tracer provider is set (the SDK's): until then the API's proxy stands in
    and spans record nothing. A provider once set stays, so only False is asked again (the
    API looks at the environment each time: a Worker asks once per claim, not per task)."""
    global _configured
    if not _configured:
        trace = _otel()[1]
        _configured = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return _configured


def traced(handler: Callable, task: dict[str, Any], is_async: bool,
           recording: bool | None = None) -> Callable:
    """`handler` run in its task's `process` span (a coroutine function stays one). The
    span starts where the handler runs: on its pool thread for a sync handler.

    With no tracer provider set (`recording` False; None: `provider_set()` is asked) and
    no submitter's context on the task, the handler runs as it is: that span would record
    nothing and carry no context into the handler (the current span stays the invalid
    one), and making it cost a sixth of a Worker's CPU per task with fast handlers. With a
    submitter's context the span is made, so the handler's own calls pass that context on
    even without an SDK."""
    if not task.get(TRACEPARENT) and not (provider_set() if recording is None else recording):
        return handler
    global _tracer
    if _tracer is None:
        _tracer = _otel()[1].get_tracer(_INSTRUMENTATION)
    tracer = _tracer
    name, kwargs = _span_args(task)
    if is_async:
        async def run_async(payload: Any, ctx: Any) -> Any:
            with tracer.start_as_current_span(name, **kwargs):
                return await handler(payload, ctx)
        return run_async

    def run(payload: Any, ctx: Any) -> Any:
        with tracer.start_as_current_span(name, **kwargs):
            return handler(payload, ctx)
    return run
