"""The peers that refused this node as not a member (transport.Refusals): what a removed
node's /readyz reads (DESIGN 6.2)."""
from __future__ import annotations

from pysyncobj.monotonic import monotonic

from tsched.node.raft.transport import REFUSALS_FRESH_S, Refusals


def test_recent_refusals_are_kept_for_a_while_then_forgotten():
    r = Refusals()
    assert r.recent() == []
    r.refused_by("127.0.0.1:10002")
    r.refused_by("127.0.0.1:10001")
    r.refused_by("127.0.0.1:10002")          # again: one peer, its latest refusal
    now = monotonic()
    assert r.recent(now) == ["127.0.0.1:10001", "127.0.0.1:10002"]
    assert r.recent(now + REFUSALS_FRESH_S + 1) == []
