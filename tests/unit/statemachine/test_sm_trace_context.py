"""A task's W3C trace context (`traceparent`, DESIGN 12): checked at apply, kept with the
task and each of its claims, in the record, the digest and the snapshot (an optional head
key), carried by a workflow to every step's task, and through a re-shard; a state without
any writes what it wrote before."""
from __future__ import annotations

import dataclasses

import msgpack
import pytest

from tsched.statemachine import StateMachine, codec, reshard
from tsched.statemachine import commands as c
from tsched.statemachine.graphs import compact

from sm_support import Driver

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TP2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
RETRY = ["fixed", 1_000, 1_000, 1_000, 0]


def _head(blob: bytes) -> dict:
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(blob)
    return unpacker.unpack()


def test_a_task_keeps_its_traceparent_through_claims_and_retries() -> None:
    d = Driver()
    d.add("t1", traceparent=TP, retry=c.RetryPolicy(backoff="fixed", base_ms=1, max_ms=1))
    task = d.claim_one()
    assert task.traceparent == TP
    d.ok(c.Fail, task_id="t1", fencing_token=task.fencing_token, error="x", retryable=True)
    d.advance(10)
    again = d.claim_one()
    assert again.attempt == 2 and again.traceparent == TP


@pytest.mark.parametrize("bad", [
    "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", TP.upper(), TP + "-00",
    "01" + TP[2:], "00-" + "0" * 32 + TP[35:], TP[:36] + "0" * 16 + TP[52:], 7, ["x"]])
def test_a_bad_traceparent_is_refused_and_nothing_is_created(bad) -> None:
    d = Driver()
    result = d.submit("t1", traceparent=bad)
    assert result.code == "invalid_argument" and result.details["field"] == "traceparent"
    assert "t1" not in d.sm.tasks


def test_the_record_and_digest_of_a_task_without_one_are_unchanged() -> None:
    plain, traced = Driver(), Driver()
    plain.add("t1")
    traced.add("t1")
    assert codec.task_record(plain.sm.tasks["t1"]) == codec.task_record(traced.sm.tasks["t1"])
    traced.add("t2", traceparent=TP)
    record = codec.task_record(traced.sm.tasks["t2"])
    assert record[-1] == TP
    assert codec.task_from(record, {}).traceparent == TP
    other = Driver()
    other.add("t1")
    other.add("t2", traceparent=TP2)
    assert other.sm.state_digest() != traced.sm.state_digest()


def test_a_snapshot_carries_the_trace_contexts_as_an_optional_head_key() -> None:
    d = Driver()
    d.add("t1")
    plain = d.sm.snapshot()
    assert "task_traces" not in _head(plain)   # absent = none: the head as before
    d.add("t2", traceparent=TP)
    d.add("t3", traceparent=TP2)
    blob = d.sm.snapshot()
    assert _head(blob)["task_traces"] == [["t2", TP], ["t3", TP2]]
    twin = StateMachine.restore(blob)
    assert [twin.tasks[t].traceparent for t in ("t1", "t2", "t3")] == [None, TP, TP2]
    assert twin.state_digest() == d.sm.state_digest()
    assert twin.snapshot() == blob


def test_a_workflow_gives_its_traceparent_to_every_step_and_keeps_it() -> None:
    d = Driver()
    rows = [("a", "t-a", "job", "null", 5, 60_000, 0, RETRY, (), "cancel"),
            ("b", "t-b", "job", "null", 5, 60_000, 0, RETRY, (0,), "cancel")]
    assert d.run(c.SubmitWorkflow, workflow_id="w1", tenant="acme", traceparent=TP,
                 **compact(rows)).ok
    assert d.sm.tasks["t-a"].traceparent == TP
    twin = StateMachine.restore(d.sm.snapshot())   # the workflow keeps it for step b
    for sm in (d.sm, twin):
        task = sm.tasks["t-a"]
        sm.apply(c.Claim(request_id="r-claim", now_ms=d.now, worker_id="w",
                         task_types=("job",)))
        assert sm.apply(c.Complete(request_id="r-complete", now_ms=d.now, task_id="t-a",
                                   fencing_token=task.fencing_token)).ok
        assert sm.tasks["t-b"].traceparent == TP
    assert twin.state_digest() == d.sm.state_digest()
    bad = d.run(c.SubmitWorkflow, workflow_id="w2", tenant="acme", traceparent="x",
                **compact([("c", "t-c", "job", "null", 5, 60_000, 0, RETRY, (), "cancel")]))
    assert bad.code == "invalid_argument" and bad.details["field"] == "traceparent"


def test_a_step_may_carry_its_own_traceparent_kept_in_its_record() -> None:
    d = Driver()
    rows = [("a", "t-a", "job", "null", 5, 60_000, 0, RETRY, (), "cancel", TP2),
            ("b", "t-b", "job", "null", 5, 60_000, 0, RETRY, (0,), "cancel")]
    assert d.run(c.SubmitWorkflow, workflow_id="w1", tenant="acme", traceparent=TP,
                 **compact(rows)).ok
    assert d.sm.tasks["t-a"].traceparent == TP2      # its own, else the workflow's
    twin = StateMachine.restore(d.sm.snapshot())
    assert twin.workflows.by_id["w1"].steps[0].traceparent == TP2
    assert twin.workflows.by_id["w1"].steps[1].traceparent is None
    assert twin.state_digest() == d.sm.state_digest()
    bad = [("c", "t-c", "job", "null", 5, 60_000, 0, RETRY, (), "cancel", "nope")]
    result = d.run(c.SubmitWorkflow, workflow_id="w2", tenant="acme", **compact(bad))
    assert result.code == "invalid_argument" and result.details["step"] == "c"


def test_the_log_reads_a_submit_without_the_field_and_writes_none_when_unset() -> None:
    cmd = c.SubmitTask(request_id="r", now_ms=1, task_id="t", tenant="a", task_type="x")
    item = msgpack.unpackb(codec.encode_batch([cmd]))[1]
    # the tag and the fields up to idempotency_key: neither added field is written
    assert item[-1] is None and len(item) == 1 + len(dataclasses.fields(cmd)) - 2
    assert codec.decode_batch(codec.encode_batch([cmd]))[0].traceparent is None
    traced = codec.decode_batch(codec.encode_batch([
        c.SubmitTask(request_id="r", now_ms=1, task_id="t", tenant="a", task_type="x",
                     traceparent=TP)]))[0]
    assert traced.traceparent == TP and traced.limits == ()


def test_a_reshard_keeps_each_tasks_traceparent() -> None:
    d = Driver()
    d.add("t1", tenant="acme", traceparent=TP)
    d.add("t2", tenant="zeta")
    blobs = reshard.reshard([d.sm.snapshot()], 2, lambda tenant: int(tenant == "zeta"))
    got = {}
    for blob in blobs:
        sm = StateMachine.restore(blob)
        got.update({tid: t.traceparent for tid, t in sm.tasks.items()})
    assert got == {"t1": TP, "t2": None}
