"""The tenants' part of the OpenAPI document: caps and weights (api/tenants.py)."""
from __future__ import annotations

from tsched.node.api.tenants import RUNNING_MAX, WEIGHT_MAX
from tsched.node.api.openapi.schema import (
    APPLIED_SEQ, APPLIED_SEQS, READ_PARAMS, SHARD, WRITE_ERRORS, Fragment, Schema, integer, obj,
    op, path_param, ref, string)

TENANT_NAME = path_param("tenant", "the tenant's name")


def _tenant() -> Schema:
    return obj({"tenant": string(), "max_running": integer(0, description="0: unlimited"),
                "weight": integer(1), "running": integer(0), "pending": integer(0),
                "applied_seq": APPLIED_SEQ, "shard": SHARD},
               ("tenant", "max_running", "weight", "running", "pending"))


def fragment() -> Fragment:
    put = obj({"max_running": integer(0, RUNNING_MAX, "0: unlimited"),
               "weight": integer(1, WEIGHT_MAX)}, closed=True)
    return Fragment({
        "/v1/tenants": {"get": op(
            "List tenants", obj({"tenants": {"type": "array", "items": ref("Tenant")},
                                 "applied_seq": APPLIED_SEQ, "shard": SHARD,
                                 "applied_seqs": APPLIED_SEQS}, ("tenants",)),
            params=READ_PARAMS, errors=(503, 504), tag="tenants")},
        "/v1/tenants/{tenant}": {
            "put": op("Set a tenant", ref("Tenant"), body=put, params=[TENANT_NAME],
                      errors=WRITE_ERRORS, tag="tenants"),
            "get": op("Get a tenant", ref("Tenant"), params=[TENANT_NAME, *READ_PARAMS],
                      errors=(404, 503, 504), tag="tenants"),
        },
    }, {"Tenant": _tenant()})
