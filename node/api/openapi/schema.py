"""The building blocks of the OpenAPI document, written once: the `Schema` alias, schema
helpers, the error schema and error answers, parameters, operations, the fields several
resources share, and `merge`, the one way a resource's fragment joins the document."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tsched.statemachine.limits import API_LIMITS

from tsched.node.api import validate as v
from tsched.node.api.jsonio import STATUS_BY_CODE

Schema = dict[str, Any]
"""A piece of the document (a schema, a parameter, an operation...): JSON, so any value."""
PathItem = dict[str, Schema]      # HTTP method -> its operation

AUTH_ERRORS = (400, 401, 403)     # what any operation may answer
WRITE_ERRORS = (404, 409, 413, 429, 503, 504)


@dataclass(frozen=True)
class Fragment:
    """One resource's part of the document: its paths and the schemas they name."""

    paths: dict[str, PathItem]
    schemas: dict[str, Schema] = field(default_factory=dict)


def merge(document: Schema, fragment: Fragment) -> None:
    """Add a fragment to the document; a path or schema defined twice is a mistake."""
    paths, schemas = document["paths"], document["components"]["schemas"]
    twice = sorted(paths.keys() & fragment.paths.keys()) + sorted(
        schemas.keys() & fragment.schemas.keys())
    if twice:
        raise ValueError(f"defined twice in the OpenAPI document: {', '.join(twice)}")
    paths.update(fragment.paths)
    schemas.update(fragment.schemas)


# --- schemas ---------------------------------------------------------------------------------

def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    return {"oneOf": [schema, {"type": "null"}]}


def obj(props: dict[str, Schema], required: tuple[str, ...] = (), *, closed: bool = False,
        description: str | None = None) -> Schema:
    out: Schema = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    if closed:
        # Requests: unknown fields are refused with invalid_argument.
        out["additionalProperties"] = False
    if description:
        out["description"] = description
    return out


def integer(lo: int | None = None, hi: int | None = None, description: str | None = None) -> Schema:
    out: Schema = {"type": "integer"}
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    if description:
        out["description"] = description
    return out


def number(lo: float, hi: float, description: str | None = None) -> Schema:
    out: Schema = {"type": "number", "minimum": lo, "maximum": hi}
    if description:
        out["description"] = description
    return out


def string(hi: int | None = None, lo: int | None = None, description: str | None = None,
           **extra: object) -> Schema:
    out: Schema = {"type": "string", **extra}
    if lo is not None:
        out["minLength"] = lo
    if hi is not None:
        out["maxLength"] = hi
    if description:
        out["description"] = description
    return out


def error_schema() -> Schema:
    """`Error`, the body of every answer of status 400 or more."""
    return obj({"error": obj({
        "code": {"type": "string", "enum": sorted(STATUS_BY_CODE)},
        "message": string(),
        "details": {"type": "object"},
    }, ("code", "message")), "applied_seq": APPLIED_SEQ, "shard": SHARD}, ("error",))


# --- fields several resources share ----------------------------------------------------------

TIME = {"type": "string", "format": "date-time", "description": "RFC 3339, UTC in responses"}
TIME_IN = {"oneOf": [{"type": "string", "format": "date-time"}, {"type": "number", "minimum": 0}],
           "description": "RFC 3339 with an offset, or epoch seconds"}
ANY_JSON = {"description": "any JSON value"}
NAME = string(v.ID_CHARS_MAX, 1)
TENANT = string(v.TENANT_CHARS_MAX, 1, pattern=v.TENANT_RE.pattern)
TASK_TYPE = string(v.TASK_TYPE_CHARS_MAX, 1)
PRIORITY = {**integer(0, v.PRIORITY_MAX), "default": 5}
TIMEOUT_S = number(v.TIMEOUT_S_MIN, v.TIMEOUT_S_MAX)
APPLIED_SEQ = integer(0, description="state machine batches applied on the answering node")
# With several shards (DESIGN.md section 13) an answer names its shard; answers merged from
# several shards carry each one's applied_seq instead of one.
SHARD = {"type": "integer", "minimum": 0, "maximum": 63,
         "description": "the shard that answered (only in a cluster with several shards)"}
APPLIED_SEQS = {"type": "object", "additionalProperties": {"type": "integer"},
                "description": "shard -> its applied_seq, in answers merged from several "
                               "shards"}


# --- parameters ------------------------------------------------------------------------------

def query(name: str, schema: Schema, description: str = "") -> Schema:
    out = {"name": name, "in": "query", "required": False, "schema": schema}
    if description:
        out["description"] = description
    return out


def path_param(name: str, description: str) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"},
            "description": description}


READ_PARAMS = [
    query("min_seq", integer(0), "wait until this node has applied this sequence number "
          "(with several shards also `shard:seq` pairs, comma-separated: each read takes "
          "its own shard's)"),
    query("consistency", {"type": "string", "enum": ["local", "linearizable"],
                          "default": "local"}),
]


# --- operations ------------------------------------------------------------------------------

RETRY_AFTER = {"description": "with `overloaded`: whole seconds to wait before retrying "
               "(DESIGN 14.2)", "schema": integer(1)}


def listing_op(summary: str, schema: Schema, **kwargs: Any) -> Schema:
    """A listing page's GET (`op`): its 429 is the node's budget of listing pages
    (node/api/read_budget.py, DESIGN 7)."""
    out = op(summary, schema, errors=(429, 503, 504), **kwargs)
    out["responses"]["429"]["description"] = (
        "`overloaded` (`details.reason` `read_budget`): this node serves at most `[limits] "
        f"list_pages_per_s` listing pages a second (default {API_LIMITS.list_pages_per_s}, "
        f"burst `list_burst_pages`, default {API_LIMITS.list_burst_pages}; GET /v1/tasks, "
        "/v1/workflows and /v1/audit together); a page past it waits for its turn up to "
        f"{API_LIMITS.list_wait_ms_max} ms, and past that is answered this at once, with "
        "Retry-After")
    return out


def json_content(schema: Schema) -> Schema:
    return {"application/json": {"schema": schema}}


def error_answers(statuses: Iterable[int]) -> dict[str, Schema]:
    """The error answers of these statuses, each naming the codes it carries."""
    out: dict[str, Schema] = {}
    for status in sorted(set(statuses)):
        codes = sorted(c for c, s in STATUS_BY_CODE.items() if s == status)
        out[str(status)] = {"description": ", ".join(codes) or "error",
                            "content": json_content(ref("Error"))}
        if status == 429:
            out["429"]["headers"] = {"Retry-After": RETRY_AFTER}
    return out


def op(summary: str, ok: Schema | None, *, status: int = 200, body: Schema | None = None,
       params: list[Schema] | None = None, errors: tuple[int, ...] = (), tag: str = "tasks",
       content_type: str = "application/json", body_required: bool = True,
       description: str | None = None, operation_id: str | None = None,
       ok_description: str = "success", base_errors: tuple[int, ...] = AUTH_ERRORS) -> Schema:
    """An operation: its success answer `ok` (None: no body), the error answers of
    `base_errors` and `errors`; the operationId is the summary's words unless given."""
    out: Schema = {"summary": summary, "tags": [tag], "operationId": operation_id or
                   summary.lower().replace(" ", "_").replace("'", "")}
    if description:
        out["description"] = description
    if params:
        out["parameters"] = params
    if body is not None:
        out["requestBody"] = {"required": body_required, "content": json_content(body)}
    answer: Schema = {"description": ok_description}
    if ok is not None:
        answer["content"] = {content_type: {"schema": ok}}
    out["responses"] = {str(status): answer, **error_answers((*base_errors, *errors))}
    return out

