"""The `otel` extra (client/otel.py): nothing of OpenTelemetry is imported with the client,
and without the packages nothing changes. Spans on a real cluster:
tests/integration/test_worker_cluster.py."""
from __future__ import annotations

import subprocess
import sys

import pytest


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_importing_the_client_imports_no_opentelemetry() -> None:
    pytest.importorskip("opentelemetry.trace")   # installed (the test extra): still not loaded
    out = _python("import sys, tsched.client, tsched.client.worker\n"
                  "from tsched.client import otel\n"
                  "assert otel.available()   # looked up, not imported\n"
                  "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    assert out == "[]"


def test_without_the_packages_nothing_is_sent_or_traced() -> None:
    """`sys.modules[name] = None` is how Python says a package is not there."""
    out = _python(
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from tsched.client import Worker, otel\n"
        "from tsched.client._api import _task_fields\n"
        "body = otel.with_traceparent(_task_fields('t', None, {}))\n"
        "wf = otel.with_step_contexts({'steps': [{'name': 'a', 'task_type': 't'}]})\n"
        "w = Worker('http://127.0.0.1:1', {'t': lambda p, c: None})\n"
        "print(otel.available(), body, wf, w._traced)")
    assert out == "False {'task_type': 't'} {'steps': [{'name': 'a', 'task_type': 't'}]} False"


def test_with_the_packages_and_no_span_no_context_is_sent() -> None:
    pytest.importorskip("opentelemetry.trace")
    from tsched.client import otel

    assert otel.available()
    assert otel.with_traceparent({"task_type": "t"}) == {"task_type": "t"}
    assert otel.with_traceparent({"traceparent": "given"}) == {"traceparent": "given"}


def test_a_handler_runs_in_a_span_only_where_the_span_can_matter() -> None:
    """No tracer provider set: a task without the submitter's context runs its handler
    as it is (the span would record nothing and carry nothing); one with a context runs in
    the span, which passes that context on. Once a provider is set, every handler runs in
    a span that records."""
    pytest.importorskip("opentelemetry.sdk.trace")
    out = _python(
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "from tsched.client import otel\n"
        "def handler(payload, ctx):\n"
        "    return format(trace.get_current_span().get_span_context().trace_id, '032x')\n"
        "plain = {'task_id': 'a', 'task_type': 't'}\n"
        "tp = '00-' + '1' * 32 + '-' + '2' * 16 + '-01'\n"
        "linked = {**plain, 'traceparent': tp}\n"
        "print(otel.traced(handler, plain, False) is handler)\n"
        "print(otel.traced(handler, linked, False)(None, None) == '1' * 32)\n"
        "spans = InMemorySpanExporter()\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(spans))\n"
        "trace.set_tracer_provider(provider)\n"
        "wrapped = otel.traced(handler, plain, False)\n"
        "print(wrapped is handler, wrapped(None, None) != '0' * 32)\n"
        "print([s.name for s in spans.get_finished_spans()])")
    assert out.splitlines() == ["True", "True", "False True", "['process t']"]
