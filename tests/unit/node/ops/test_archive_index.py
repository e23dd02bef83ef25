"""The archive's index and pruning (DESIGN 14.3): a search by task id reads only the member
the index names; an index that is missing, torn or behind its file is rebuilt by the next
write and never hides a task; files older than keep_days are removed, by the day they
name and the "now" given."""
from __future__ import annotations

import os

from tsched.node.ops import archive_search as arch
from tsched.node.ops.archiver import Archive, prune
from tsched.statemachine.archive_format import (DAY_MS, INDEX_RECORD, file_name, index_end,
                                                index_name)
from tsched.statemachine.commands import RetryPolicy
from tsched.statemachine.model import Task

T0 = 1_767_225_600_000      # 2026-01-01T00:00:00Z


def done(tid: str, tenant: str = "acme", at_ms: int = T0) -> Task:
    t = Task(tid, tenant, "settle", "{}", 5, at_ms, 3, RetryPolicy(), 60_000, None, None,
             at_ms, 0)
    t.state, t.started_at_ms, t.completed_at_ms = "completed", at_ms, at_ms + 1
    return t


def fill(archive: Archive, now_ms: int, members: int, per_member: int,
         tag: str = "ab") -> list[str]:
    """`members` evicting Ticks of `per_member` tasks each; every id, in order."""
    ids = []
    for m in range(members):
        batch = [done(f"{m:04d}{i:04d}" + tag * 12) for i in range(per_member)]
        archive.write(now_ms, batch)
        ids += [t.task_id for t in batch]
    return ids


def by_id(directory, tid: str) -> arch.Page:
    return arch.search(directory, arch.Search(task_id=tid))


def test_a_search_by_id_reads_only_the_member_the_index_names(tmp_path):
    archive = Archive(tmp_path)
    ids = fill(archive, T0, members=50, per_member=200)        # 10,000 lines
    index = (tmp_path / index_name(file_name(T0))).read_bytes()
    assert len(index) == INDEX_RECORD.size * (10_000 + 50)     # a record a task, an end a member
    assert index_end(index)[0] == (tmp_path / file_name(T0)).stat().st_size
    first = by_id(tmp_path, ids[0])
    assert [r["task"]["task_id"] for r in first.records] == [ids[0]]
    assert first.lines == 200 and first.next is None           # one member, not 10,000 lines
    assert by_id(tmp_path, ids[-1]).lines == 200
    missing = by_id(tmp_path, "f" * 32)
    assert missing.records == [] and missing.lines == 0
    # a tenant search still reads every line
    assert arch.search(tmp_path, arch.Search(tenant="acme", limit=1000)).lines == 1000


def test_a_repeat_in_a_later_member_wins_and_from_to_still_bound(tmp_path):
    archive = Archive(tmp_path)
    first = done("x" * 32)
    archive.write(T0, [first])
    fill(archive, T0, members=3, per_member=10)
    again = done("x" * 32)
    again.result_json = '"second"'
    archive.write(T0, [again])                  # a replayed Tick writes it again
    page = by_id(tmp_path, "x" * 32)
    (record,) = page.records
    assert record["task"]["result"] == "second" and page.lines == 2
    late = arch.search(tmp_path, arch.Search(task_id="x" * 32, from_ms=T0 + DAY_MS))
    assert late.records == []


def test_a_file_without_an_index_or_past_it_is_read_line_by_line(tmp_path):
    archive = Archive(tmp_path)
    ids = fill(archive, T0, members=4, per_member=10)
    index = tmp_path / index_name(file_name(T0))
    whole = index.read_bytes()
    index.write_bytes(whole[:INDEX_RECORD.size * 22 + 5])   # two members' records, then torn
    tail = by_id(tmp_path, ids[-1])
    assert [r["task"]["task_id"] for r in tail.records] == [ids[-1]] and tail.lines == 20
    head = by_id(tmp_path, ids[0])
    # its member, then the part the index does not cover (a repeat may be there)
    assert [r["task"]["task_id"] for r in head.records] == [ids[0]] and head.lines == 30
    index.unlink()                                          # a file of an older version
    assert by_id(tmp_path, ids[5]).lines == 40
    # the next write to the day, by a restarted node, rebuilds the index first
    later = Archive(tmp_path)
    more = fill(later, T0, members=1, per_member=10, tag="cd")
    rebuilt = index.read_bytes()
    assert len(rebuilt) == INDEX_RECORD.size * (50 + 5)
    assert rebuilt[:len(whole)] == whole
    for tid in (ids[0], ids[-1], more[-1]):
        page = by_id(tmp_path, tid)
        assert [r["task"]["task_id"] for r in page.records] == [tid] and page.lines == 10


def test_files_older_than_keep_days_are_removed(tmp_path):
    archive = Archive(tmp_path, keep_days=7)
    for day in range(10):
        archive.write(T0 + day * DAY_MS, [done(f"t{day}" + "0" * 30)])
        archive.write_audit(T0 + day * DAY_MS, [])
    names = sorted(os.listdir(tmp_path))
    # each new day's first write pruned the days that ended 7 days or more before it
    assert file_name(T0) not in names and file_name(T0 + 2 * DAY_MS) in names
    assert index_name(file_name(T0)) not in names
    now = T0 + 20 * DAY_MS + 1
    gone = prune(tmp_path, now, keep_days=12)       # days 0..7 ended at least 12 days ago
    assert gone == sorted(n for n in names if any(f"-2026-01-0{d}." in n for d in range(3, 9)))
    assert sorted(os.listdir(tmp_path)) == sorted(set(names) - set(gone))
    assert prune(tmp_path, now, keep_days=12) == []
    kept = Archive(tmp_path)                        # no keep_days: nothing removed
    assert kept.prune(now + 1000 * DAY_MS) == []
    assert by_id(tmp_path, "t9" + "0" * 30).records
