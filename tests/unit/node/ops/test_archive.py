"""The audit archive's files (DESIGN 14.3): written from a Tick's evictions, read back with
repeats dropped, and a corrupt or truncated file reported by name and skipped."""
from __future__ import annotations

import gzip

from tests.unit.statemachine.sm_support import T0, Driver
from tsched.client.archive import Query, search
from tsched.node.ops.archiver import Archive
from tsched.statemachine import commands as c
from tsched.statemachine.archive_format import file_name
from tsched.statemachine.graphs import compact

DAY_MS = 86_400_000


def _finished_driver() -> Driver:
    """Two completed tasks, "a" (acme, settle) and "b" (beta, report)."""
    d = Driver()
    d.add("a", tenant="acme", task_type="settle")
    d.add("b", tenant="beta", task_type="report")
    for _ in range(2):
        t = d.claim_one(task_types=("settle", "report"))
        d.ok(c.Complete, task_id=t.task_id, fencing_token=t.fencing_token, result_json="1")
    return d


def test_a_tick_that_evicts_is_archived_and_read_back(tmp_path) -> None:
    d = _finished_driver()
    archive = Archive(tmp_path)
    d.now += d.sm.limits.retention_ms + 1
    tick = c.Tick(request_id="t", now_ms=d.now)
    results = d.sm.apply_batch([tick])
    archive.on_apply(d.sm.seq, [tick], results)     # as the Replica calls its listeners
    assert d.sm.get_task("a") is None and archive.archived == 2
    assert (tmp_path / file_name(d.now)).exists()
    found = search(tmp_path, Query())
    assert [r["task"]["task_id"] for r in found.records] == ["a", "b"] and not found.skipped
    assert found.records[0]["task"]["result"] == 1 and found.records[0]["v"] == 1
    assert [r["task"]["task_id"] for r in search(tmp_path, Query(tenant="beta")).records] \
        == ["b"]
    assert [r["task"]["task_id"] for r in search(tmp_path, Query(task_type="settle")).records] \
        == ["a"]
    assert search(tmp_path, Query(from_ms=d.now)).records == []   # completed long before


def test_an_archived_step_names_its_workflow(tmp_path) -> None:
    d = Driver()
    rows = (("only", "step-1", "settle", "null", 5, 60_000, 0, ("fixed", 1, 1, 1_000, 0), (),
             "cancel"),)
    d.ok(c.SubmitWorkflow, workflow_id="wf-1", tenant="acme", **compact(rows))
    d.add("plain", tenant="acme", task_type="settle")
    for _ in range(2):
        t = d.claim_one(task_types=("settle",))
        d.ok(c.Complete, task_id=t.task_id, fencing_token=t.fencing_token)
    archive = Archive(tmp_path)
    d.now += d.sm.limits.retention_ms + 1
    tick = c.Tick(request_id="t", now_ms=d.now)
    archive.on_apply(d.sm.seq, [tick], d.sm.apply_batch([tick]))
    by_id = {r["task"]["task_id"]: r["task"] for r in search(tmp_path, Query()).records}
    assert by_id["step-1"]["workflow"] == {"workflow_id": "wf-1", "step": "only"}
    assert "workflow" not in by_id["plain"]


def test_repeats_are_dropped_and_bad_files_skipped_by_name(tmp_path) -> None:
    d = _finished_driver()
    archive = Archive(tmp_path)
    tasks = [d.sm.get_task("a"), d.sm.get_task("b")]
    archive.write(T0, tasks)
    archive.write(T0, tasks[:1])              # a replayed Tick archives "a" again
    archive.write(T0 + DAY_MS, tasks[1:])     # and the next day's file
    good = tmp_path / file_name(T0 + DAY_MS)
    blob = good.read_bytes()
    (tmp_path / file_name(T0 + 2 * DAY_MS)).write_bytes(blob[: len(blob) // 2])   # truncated
    (tmp_path / file_name(T0 + 3 * DAY_MS)).write_bytes(b"not gzip at all")
    (tmp_path / file_name(T0 + 4 * DAY_MS)).write_bytes(gzip.compress(b'{"v": 1}\n'))
    found = search(tmp_path, Query())
    assert sorted(r["task"]["task_id"] for r in found.records) == ["a", "b"]
    skipped = dict(found.skipped)
    assert sorted(skipped) == [file_name(T0 + k * DAY_MS) for k in (2, 3, 4)]
    assert "not an archive record" in skipped[file_name(T0 + 4 * DAY_MS)]
    assert [r["task"]["task_id"] for r in search(tmp_path, Query(task_id="a")).records] == ["a"]
