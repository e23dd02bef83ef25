"""The OpenAPI document is true to the app: same routes both ways, well-formed references."""
from __future__ import annotations

import re

import orjson

from tsched.node.api import openapi
from tsched.node.services import Node
from tsched.node.api.app import make_app
from tsched.node.api.jsonio import STATUS_BY_CODE

METHODS = {"get", "put", "post", "delete", "patch"}


def _shape(path: str) -> str:
    """Parameter names may differ between the router and the document; positions may not."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def served_routes() -> set[tuple[str, str]]:
    app = make_app(Node(node_id="n1", config=None, replica=object(), clock=None))
    out = set()
    for route in app.router.routes():
        if route.method in ("HEAD", "*") or route.resource is None:
            continue
        out.add((route.method.lower(), _shape(route.resource.canonical)))
    return out


def documented_routes() -> set[tuple[str, str]]:
    doc = openapi.document()
    return {(m, _shape(p)) for p, ops in doc["paths"].items() for m in ops if m in METHODS}


def test_every_served_route_is_documented_and_vice_versa():
    served, documented = served_routes(), documented_routes()
    assert ("get", "/v1/tasks/{}") in served      # the factory really mounted the API
    assert served - documented == set(), "routes missing from the OpenAPI document"
    assert documented - served == set(), "documented routes the app does not serve"


def test_document_is_openapi_3_1_json():
    doc = orjson.loads(openapi.document_bytes())
    assert doc["openapi"].startswith("3.1")
    assert doc["info"]["title"] == "tsched"
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))


def _refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def test_every_reference_resolves():
    doc = openapi.document()
    schemas = doc["components"]["schemas"]
    refs = set(_refs(doc))
    assert refs, "the document uses shared schemas"
    for ref in refs:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.rsplit("/", 1)[1] in schemas, ref


def test_path_parameters_are_declared():
    for path, ops in openapi.document()["paths"].items():
        names = set(re.findall(r"\{([^}]*)\}", path))
        for method, op in ops.items():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == names, (method, path)


def test_errors_use_the_error_shape_and_known_codes():
    doc = openapi.document()
    error = doc["components"]["schemas"]["Error"]
    assert error["required"] == ["error"]
    assert set(error["properties"]["error"]["properties"]["code"]["enum"]) == set(STATUS_BY_CODE)
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status, answer in op["responses"].items():
                if int(status) >= 400:
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (method, path)


def test_request_schemas_refuse_unknown_fields_and_state_the_node_limits():
    schemas = openapi.document()["components"]["schemas"]
    submit = schemas["TaskSubmit"]
    assert submit["additionalProperties"] is False
    assert submit["required"] == ["task_type"]
    assert submit["properties"]["priority"]["minimum"] == 0
    assert submit["properties"]["priority"]["maximum"] == 10
    claim = schemas["ClaimRequest"]
    assert claim["properties"]["prefetch_ms"]["maximum"] == 1000
    preview = openapi.document()["paths"]["/v1/cron/preview"]["get"]
    count = next(p for p in preview["parameters"] if p["name"] == "count")
    assert count["schema"]["maximum"] == 100


def test_task_schema_names_every_field_of_the_contract():
    fields = ("task_id tenant task_type payload priority run_at state attempt max_retries retry "
              "timeout_s idempotency_key execution_id schedule_id lease_expires_at fencing_token "
              "worker_id cancel_requested last_error result created_at started_at completed_at "
              "attempts").split()
    props = openapi.document()["components"]["schemas"]["Task"]["properties"]
    assert [f for f in fields if f not in props] == []


def test_document_states_the_bounds_of_limits():
    """Every bound in the document is the state machine's (statemachine/limits.py), in the
    API's units: the document refuses what the state machine would refuse."""
    from tsched.statemachine.limits import API_LIMITS as A
    from tsched.statemachine.limits import LIMITS as L

    doc = openapi.document()
    schemas = doc["components"]["schemas"]
    submit, claim = schemas["TaskSubmit"]["properties"], schemas["ClaimRequest"]["properties"]
    retry, tenant = schemas["RetryPolicy"]["properties"], schemas["SchedulePut"]["properties"]
    assert str(L.payload_bytes_max) in submit["payload"]["description"]
    assert submit["task_type"]["maxLength"] == L.task_type_chars_max
    assert submit["tenant"]["maxLength"] == L.tenant_chars_max
    assert submit["priority"]["maximum"] == L.priority_max
    assert submit["delay_s"]["maximum"] * 1000 == L.run_at_ahead_ms_max
    assert submit["timeout_s"]["minimum"] * 1000 == L.timeout_ms_min
    assert submit["timeout_s"]["maximum"] * 1000 == L.timeout_ms_max
    assert submit["max_retries"]["maximum"] == L.max_retries_max
    assert submit["idempotency_key"]["maxLength"] == L.idempotency_key_chars_max
    assert retry["base_s"]["maximum"] * 1000 == L.backoff_ms_max
    assert retry["multiplier"]["minimum"] * 1000 == L.multiplier_milli_min
    assert retry["multiplier"]["maximum"] * 1000 == L.multiplier_milli_max
    assert retry["jitter"]["maximum"] * 1000 == L.jitter_permille_max
    assert claim["task_types"]["maxItems"] == L.claim_task_types_max
    assert claim["max_tasks"]["maximum"] == L.claim_tasks_max
    assert claim["lease_s"]["minimum"] * 1000 == L.lease_ms_min
    assert claim["lease_s"]["maximum"] * 1000 == L.lease_ms_max
    assert claim["prefetch_ms"]["maximum"] == L.prefetch_ms_max
    assert claim["wait_s"]["maximum"] * 1000 == A.claim_wait_ms_max
    assert tenant["catchup_window_s"]["maximum"] * 1000 == L.catchup_window_ms_max
    assert tenant["jitter_s"]["maximum"] * 1000 == L.jitter_ms_max
    assert tenant["cron"]["maxLength"] == L.cron_chars_max
    assert tenant["task"]["properties"]["timeout_s"]["minimum"] * 1000 == L.timeout_ms_min
    fail = schemas["FailRequest"]["properties"]
    plain, detail = fail["error"]["oneOf"]
    assert str(L.error_bytes_max) in plain["description"]
    assert str(L.error_bytes_max) in detail["description"]
    assert detail["properties"]["traceback"]["maxLength"] == A.traceback_chars_max
    assert detail["properties"]["message"]["maxLength"] == A.error_message_chars_max
    assert fail["fencing_token"]["maximum"] == L.fencing_token_max
    put = doc["paths"]["/v1/tenants/{tenant}"]["put"]["requestBody"]["content"]
    settings = put["application/json"]["schema"]["properties"]
    assert settings["weight"]["maximum"] == L.tenant_weight_max
    assert settings["max_running"]["maximum"] == L.tenant_running_max
