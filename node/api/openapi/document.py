"""The whole document: the resources' fragments merged, in this order, into one frame."""
from __future__ import annotations

import functools

import orjson

from tsched.node.api.openapi import (archive_spec, audit_spec, backup_spec, cluster_spec,
                                     limits_spec, members_spec, monitoring_spec, queues_spec,
                                     schedules_spec, tasks_spec, tenants_spec, workers_spec,
                                     workflows_spec)
from tsched.node.api.openapi.schema import Fragment, Schema, error_schema, merge

OPENAPI_VERSION = "3.1.0"
API_VERSION = "1"
FRAGMENTS = (tasks_spec, workers_spec, schedules_spec, tenants_spec, cluster_spec, backup_spec,
             monitoring_spec, archive_spec, audit_spec, members_spec, limits_spec,
             workflows_spec, queues_spec)


def fragments() -> list[Fragment]:
    return [module.fragment() for module in FRAGMENTS]


def build() -> Schema:
    """A new document, built from the fragments."""
    doc: Schema = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "tsched",
            "version": API_VERSION,
            "description": "A Raft-replicated distributed task scheduler. Every answer of a "
                           "read or write carries applied_seq; pass ?min_seq=N to read your "
                           "writes from any node.",
        },
        "paths": {},
        "components": {
            "schemas": {"Error": error_schema()},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "admin or tenant-scoped token "
                                                          "(when [auth] is configured)"}},
        },
        "security": [{}, {"bearer": []}],
    }
    for fragment in fragments():
        merge(doc, fragment)
    return doc


def components() -> dict[str, Schema]:
    """Every schema of the document (a new copy)."""
    schemas: dict[str, Schema] = build()["components"]["schemas"]
    return schemas


@functools.cache
def document() -> Schema:
    """The whole document (built once; callers must not mutate it)."""
    return build()


@functools.cache
def document_bytes() -> bytes:
    return orjson.dumps(document())
