"""The OpenAPI 3.1 document of the HTTP API (DESIGN.md section 7), served at /v1/openapi.json.

`schema.py` holds the helpers (`Schema`, `op`, `query`, the error answers, `merge`); each
resource has its fragment module beside the others (tasks, workers, schedules, tenants,
cluster, backup, monitoring, archive, audit, members), and `document.py` merges them. A new
endpoint adds its paths and schemas to its resource's fragment. Bounds come from the code
that enforces them, so the document states the limits the node enforces;
`tests/unit/node/api/test_openapi.py` checks that every route the app serves is documented
and every documented route is served.
"""
from __future__ import annotations

from tsched.node.api.openapi.document import components, document, document_bytes
from tsched.node.api.openapi.workers_spec import CLAIMED_FIELDS

__all__ = ["CLAIMED_FIELDS", "components", "document", "document_bytes"]
