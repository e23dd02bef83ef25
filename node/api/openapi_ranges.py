"""OpenAPI schemas of the priority-range, tier-weight and retry-after fields (DESIGN.md
sections 5, 5.1, 7)."""
from __future__ import annotations

from typing import Any

from tsched.node.api.claim_parsing import PRIORITY_MAX, RETRY_AFTER_S_MAX, TIER_WEIGHT_MAX

CLAIM_RANGE: dict[str, Any] = {
    "priority_min": {"type": "integer", "minimum": 0, "maximum": PRIORITY_MAX, "default": 0,
                     "description": "only tasks whose effective priority (aging included) "
                                    "is at least this"},
    "priority_max": {"type": "integer", "minimum": 0, "maximum": PRIORITY_MAX,
                     "default": PRIORITY_MAX,
                     "description": "... and at most this (not below priority_min)"},
    "tier_weights": {"type": "object", "minProperties": 1,
                     "additionalProperties": {"type": "integer", "minimum": 1,
                                              "maximum": TIER_WEIGHT_MAX},
                     "example": {"critical": 50, "high": 30, "normal": 15, "low": 5},
                     "description": "weighted polling by tier: tier name (of the cluster's "
                                    "table, GET /v1/cluster `tiers`) -> weight; the claim "
                                    "takes only those tiers' tasks and splits them by "
                                    "smooth weighted round robin (an empty tier's share "
                                    "goes to the others). Not with priority_min / "
                                    "priority_max"},
}

FAIL_FIELDS: dict[str, Any] = {
    "retryable": {"type": "boolean", "default": True},
    "retry_after_s": {"type": "number", "exclusiveMinimum": 0, "maximum": RETRY_AFTER_S_MAX,
                      "description": "the retry is due after exactly this many seconds "
                                     "instead of the backoff (at most the task's "
                                     "retry.max_s)"},
}
