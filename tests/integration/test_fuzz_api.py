"""Schemathesis over every operation of /v1/openapi.json against a real tsnode with [auth].

For each operation, Hypothesis (derandomized: the same cases every run) generates valid
requests from the schema and invalid ones (negative mode), sent with an admin token and with
a tenant token. No answer may be a 5xx, every error must be in the API's error shape with the
status its code maps to, and the node must still be healthy with no `http_500` in its log.

Two documented waits are kept short so the run stays well under a minute: `min_seq` is
clamped to what the node has applied (a far-ahead one is a 504 `timeout` after 5 s, by
design) and a claim's `wait_s` to 0.2 s.
"""
from __future__ import annotations

import hashlib
import time

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable

from tsched.node.api import openapi
from tsched.node.api.jsonio import STATUS_BY_CODE

from tests.harness.cluster import Cluster

# A test dependency (pyproject.toml's `test` extra).
schemathesis = pytest.importorskip("schemathesis")
from schemathesis.generation import GenerationMode  # noqa: E402

pytestmark = pytest.mark.timeout(120)

ADMIN, ACME = "fuzz-admin-token", "fuzz-acme-token"
AUTH_TOML = f"""
[auth]
admin_token_sha256 = ["{hashlib.sha256(ADMIN.encode()).hexdigest()}"]
[auth.tenant_token_sha256]
acme = ["{hashlib.sha256(ACME.encode()).hexdigest()}"]
"""
EXAMPLES = {(ADMIN, GenerationMode.POSITIVE): 12, (ADMIN, GenerationMode.NEGATIVE): 12,
            (ACME, GenerationMode.POSITIVE): 4}
WAIT_S_MAX = 0.2

SCHEMA = schemathesis.openapi.from_dict(orjson.loads(openapi.document_bytes()))
OPERATIONS = [r.ok() for r in SCHEMA.get_all_operations()]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("fuzz"), size=1, extra_toml=AUTH_TOML,
                 status_token=ADMIN) as c:
        c.start()
        c.wait_leader()
        c.started = time.monotonic()
        c.statuses = {}             # status -> count, over the whole run
        yield c
        assert c.call("n1", "GET", "/healthz")[0] == 200
        assert "http_500" not in c.log("n1", tail_chars=10**7), c.log("n1")


def test_the_served_document_is_the_one_fuzzed(node):
    status, served = node.call("n1", "GET", "/v1/openapi.json")
    assert status == 200 and served == orjson.loads(openapi.document_bytes())
    assert len(OPERATIONS) >= 25


def _tame(case, node) -> None:
    """Keep the two designed waits short (see the module docstring). The node's applied
    seq is asked for only where a case waits for one (a request of its own each time)."""
    q = case.query if isinstance(case.query, dict) else None
    if q and "min_seq" in q:
        applied_seq = int(node.self_status("n1", timeout_s=5)["applied_seq"])
        try:
            if int(str(q["min_seq"])) > applied_seq:
                q["min_seq"] = applied_seq
        except ValueError:
            pass
    body = case.body if isinstance(case.body, dict) else None
    if body and isinstance(body.get("wait_s"), (int, float)) and body["wait_s"] > WAIT_S_MAX:
        body["wait_s"] = WAIT_S_MAX


def _check(op, case, resp) -> None:
    where = f"{op.method.upper()} {op.path} query={case.query!r} body={case.body!r}"
    assert resp.status_code < 500, f"{where} -> {resp.status_code} {resp.text[:500]}"
    if resp.status_code < 400:
        return
    body = resp.json()
    code = body["error"]["code"]
    assert STATUS_BY_CODE.get(code) == resp.status_code, f"{where} -> {resp.text[:500]}"


@pytest.mark.parametrize("op", OPERATIONS, ids=[f"{o.method.upper()} {o.path}"
                                                for o in OPERATIONS])
def test_no_request_gets_a_server_error(node, op):
    url = node.url("n1")
    sent = 0
    for (token, mode), examples in EXAMPLES.items():
        headers = {"Authorization": f"Bearer {token}"}

        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy(generation_mode=mode))
        def run(case):
            nonlocal sent
            _tame(case, node)
            resp = case.call(base_url=url, headers=headers, timeout=15)  # noqa: B023 - run() is called in this iteration
            sent += 1
            node.statuses[resp.status_code] = node.statuses.get(resp.status_code, 0) + 1
            _check(op, case, resp)

        try:
            run()
        except Unsatisfiable:
            if mode is not GenerationMode.NEGATIVE:   # nothing to get wrong: no parameters
                raise
    assert sent > 0


def test_the_run_reached_the_handlers_and_stayed_bounded(node):
    """Runs after the operations above: valid requests were served, invalid ones refused."""
    if not node.statuses:
        pytest.skip("run together with the fuzzed operations above")
    ok = sum(n for status, n in node.statuses.items() if status < 300)
    refused = sum(n for status, n in node.statuses.items() if 400 <= status < 500)
    assert ok >= 50 and refused >= 100, node.statuses
    assert node.statuses.get(401, 0) == 0, node.statuses     # every token was accepted
