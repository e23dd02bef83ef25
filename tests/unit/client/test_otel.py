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
