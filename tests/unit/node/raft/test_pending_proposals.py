"""A replica applies the batches it proposed from the commands it encoded (node/raft/pending_proposals.py):
only for exactly those bytes, and those commands are what decoding would give, field by
field and type by type."""
from __future__ import annotations

import dataclasses

from tsched.node.raft import pending_proposals
from tsched.node.api import claim_parsing, submission
from tsched.node.raft.pending_proposals import ProposedBatches
from tsched.statemachine import codec
from tsched.statemachine import commands as c


def _batch(n: int, rid: str = "r") -> tuple[list, bytes]:
    cmds = [c.Barrier(request_id=f"{rid}-{i}", now_ms=1_000 + i) for i in range(n)]
    return cmds, codec.encode_batch(cmds)


def test_a_kept_batch_is_taken_once_for_its_exact_bytes_and_only_them():
    kept = ProposedBatches(c.Batch.of)
    cmds, blob = _batch(3)
    kept.keep(blob, cmds)
    got = kept.take(bytes(bytearray(blob)))           # equal bytes, another object
    assert got == cmds and got.raw == blob and isinstance(got, c.Batch)
    assert kept.take(blob) is None and len(kept) == 0   # taken: decoded if applied again
    other, other_blob = _batch(3, rid="s")
    kept.keep(blob, cmds)
    assert kept.take(other_blob) is None                # never seen: decoded
    assert kept.take(blob) == cmds and kept.taken == 2


def test_bytes_with_a_kept_batchs_head_but_other_contents_are_decoded():
    kept = ProposedBatches(c.Batch.of)
    cmds, blob = _batch(10)
    assert len(blob) > pending_proposals.HEAD_BYTES
    kept.keep(blob, cmds)
    forged = blob[:-1] + bytes([blob[-1] ^ 1])          # same length and head
    assert kept.take(forged) is None and len(kept) == 0


def test_kept_batches_are_bounded_and_leave_oldest_first():
    kept = ProposedBatches(c.Batch.of)
    batches = [_batch(1, rid=f"b{i}") for i in range(pending_proposals.ENTRIES_MAX + 10)]
    for cmds, blob in batches:
        kept.keep(blob, cmds)
    assert len(kept) == pending_proposals.ENTRIES_MAX
    assert kept.take(batches[0][1]) is None             # gone: decoded when applied
    assert kept.take(batches[-1][1]) == batches[-1][0]


def _same_types(a, b) -> bool:
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(
            _same_types(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same_types, a, b))
    return type(a) is type(b) and a == b


def test_the_commands_the_api_builds_decode_to_equal_commands_of_the_same_types():
    """What the leader applies without decoding is what its followers decode."""
    submit = submission.submit({"task_type": "email", "payload": {"to": ["a", 1, 2.5, None]},
                              "tenant": "acme", "priority": 7, "delay_s": 1.5,
                              "timeout_s": 90, "max_retries": 4, "idempotency_key": "k-1",
                              "retry": {"backoff": "exponential", "base_s": 0.5,
                                        "max_s": 30, "multiplier": 1.5, "jitter": 0.2}},
                             now_ms=5_000, request_id="r1", task_id="t1")
    plain = submission.submit({"task_type": "email"}, now_ms=5_000, request_id="r2",
                            task_id="t2")
    p = claim_parsing.claim({"worker_id": "w", "task_types": ["b", "a"], "max_tasks": 10,
                        "lease_s": 12.5, "prefetch_ms": 250})
    claim = c.Claim(request_id="r3", now_ms=5_001, worker_id=p.worker_id,
                    task_types=p.task_types, max_tasks=p.max_tasks,
                    lease_ms=p.lease_ms, prefetch_ms=p.prefetch_ms, tenant=None)
    done = claim_parsing.completion({"task_id": "t1", "fencing_token": 3, "result": {"ok": 1}},
                               "completions[0]")
    failed = claim_parsing.completion({"task_id": "t2", "fencing_token": 4, "error": "boom",
                                  "retryable": False}, "completions[1]")
    cmds = [submit, plain, claim,
            c.Complete(request_id="r4", now_ms=5_002, task_id=done.task_id,
                       fencing_token=done.fencing_token, result_json=done.result_json,
                       tenant="acme"),
            c.Fail(request_id="r5", now_ms=5_002, task_id=failed.task_id,
                   fencing_token=failed.fencing_token, error=failed.error,
                   retryable=failed.retryable, tenant=None),
            c.Tick(request_id="r6", now_ms=5_003)]
    decoded = codec.decode_batch(codec.encode_batch(cmds))
    assert decoded == cmds and _same_types(list(decoded), cmds)
