"""Snapshots' bytes: the replicated state as msgpack, and back (snapshot.py drives them).

A snapshot (format 5 and 6) is a msgpack map of counters and plain lists in a canonical order
(tenants and schedules sorted, the record counts, the digest's `roll` and the
`state_digest`), then the tasks in seq order in chunks of up to `TASK_CHUNK` rows
(`records.task_chunk`), then an array of the request records in table order, then when those entries were
recorded, as an array of runs `[ms, count]` in table order (request_table.py; ms -1: an
entry restored from an older format, untimed): equal states encode to equal bytes.
Format 6 is format 5 with the audit trail in the head (`audit_seq`, `audit`: entry
records oldest first, audit.py). Format 7 is format 6 with keyed limits and workflows in
the head (`limits`: each definition with its busy partitions; `task_limits`: [task id,
names] of the tasks that name limits, by id; ratelimits.py; `wf_seq`, `wf_finish_seq`,
`workflows`: records in submission order, graphs.py, present once a workflow was
submitted). Format 8 is format 7 with four optional keys in the head, absent = none:
`queue_pauses`, the paused queues' records by key (pauses.py), present while a pause
stands; `task_progress`, running tasks' progress, [task id, permille, message, at_ms] by
id (store.py), present while some running task has some; `sessions`, the open worker sessions by worker id (sessions.py); `task_traces`, [task id, traceparent] of the tasks that carry the submitter's W3C
trace context, by id, present once one does. A node that reads only up to format 7 refuses
it by its number, rather than drop what it does not know. Format 4 is format 5 without the runs. Formats 1-3 are read (3: the head has `tasks_sum` instead of the
roll, and the request records are followed by their item hashes, one bin of 16 bytes each).
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

import msgpack

from .codec import pack
from .errors import DecodeError
from .model import Task
from .records import request_record, task_chunk, task_from, tasks_of_chunk
from .validate import Rejected, traceparent

SNAPSHOT_VERSION = 8               # 8: format 7, optional pauses, sessions, traces in the head
SNAPSHOT_VERSIONS_READ = (1, 2, 3, 4, 5, 6, 7, 8)   # 1: tasks a list inside the map; 2: one by one
TASK_CHUNK = 4096                    # task records per array in a format 3, 4 or 5 snapshot
_first = operator.itemgetter(0)   # mapped lazily: compiled, a returned genexp becomes a list
# A record's canonical bytes as read from a format 1 or 2 snapshot.
Encoded = bytes | memoryview
# What decoding yields per chunk: Tasks in seq order, and their encodings (formats 1, 2).
TaskChunk = tuple[list[Task], list[Encoded] | None]


class SizedTasks(Protocol):
    """Tasks in seq order, counted up front (a list, snapshot.py's `_Sized`)."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Task]: ...


def trace_fields(tasks: Iterable[Task]) -> dict:
    """The head's `task_traces`: [task id, traceparent] of the tasks that have one, by id;
    absent when none has (an optional key: absent = none, so a state without trace
    contexts writes the same head as before)."""
    traces = sorted([t.task_id, t.traceparent] for t in tasks if t.traceparent is not None)
    return {"task_traces": traces} if traces else {}


def traces_of(head: dict) -> dict[str, str]:
    """task id -> traceparent from a head's `task_traces`, each one checked."""
    try:
        traces = {task_id: tp for task_id, tp in head.get("task_traces", ())}
        for tp in traces.values():
            traceparent(tp)
    except (TypeError, ValueError, Rejected) as exc:
        raise DecodeError(f"snapshot task traces: {exc.__class__.__name__}") from None
    if len(traces) != len(head.get("task_traces", ())):
        raise DecodeError("snapshot task traces: a task id appears twice")
    return traces


def encode_snapshot(head: dict, tasks: SizedTasks, requests: Mapping[str, tuple],
                    request_times: list) -> bytes:
    """`head`: {"v", "seq", "now_ms", "cluster_token", "task_seq", "tenants", "schedules",
    "roll", "state_digest"} with record lists in canonical order; `tasks`: a sized iterable
    of Tasks in seq order; `requests`: the request table (an ordered mapping);
    `request_times`: its runs [ms, count]. One Packer appends everything to one buffer: the
    head (with both counts), the tasks in chunks of `TASK_CHUNK` rows, an array of the
    request records, the array of runs."""
    packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    packer.pack(dict(head, task_count=len(tasks), request_count=len(requests)))
    pack_one = packer.pack
    chunk: list = []
    for task in tasks:
        chunk.append(task)
        if len(chunk) == TASK_CHUNK:
            pack_one(task_chunk(chunk))
            chunk = []
    if chunk:
        pack_one(task_chunk(chunk))
    pack_one([request_record(request_id, rec) for request_id, rec in requests.items()])
    pack_one(request_times)
    return packer.bytes()


def decode_snapshot(blob: bytes, intern: Callable[[str], str] = lambda s: s
                    ) -> tuple[dict, Iterator[TaskChunk], Iterator[Any], list]:
    """(head, tasks, requests, request_times): two iterators, to be consumed in that order,
    and a list of runs [ms, count] that holds the request table's times once `requests` is
    consumed (format 5; empty for the older ones). `tasks` yields
    (Tasks, encodings): a list of Tasks in seq order, and their records' canonical bytes
    (memoryviews) when the format has them (1 and 2), else None; `requests` yields the
    request records (formats 1-3 with item hashes, which are checked and dropped). `intern` is
    applied to repeated strings. They raise DecodeError on a malformed or truncated
    blob."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise DecodeError("a snapshot is bytes")
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, use_list=False,
                                max_buffer_size=max(len(blob), 1 << 20))
    unpacker.feed(blob)
    try:
        head = unpacker.unpack()
    except Exception as exc:   # msgpack raises several unrelated types on junk
        raise DecodeError(f"not a snapshot: {exc.__class__.__name__}") from None
    if not isinstance(head, dict) or head.get("v") not in SNAPSHOT_VERSIONS_READ:
        version = head.get("v") if isinstance(head, dict) else None
        raise DecodeError(f"unknown snapshot version {version!r} (this node reads "
                          f"{', '.join(map(str, SNAPSHOT_VERSIONS_READ))})")
    cache: dict = {}
    times: list = []
    if head["v"] == 1:
        return (head, _chunked(_records_v1(head.get("tasks", ())), cache, intern),
                map(_first, _records_v1(head.get("requests", ()))), times)
    counts = head.get("task_count", -1), head.get("request_count", -1)
    if any(type(n) is not int or n < 0 for n in counts):
        raise DecodeError("snapshot without record counts")
    view = memoryview(blob)
    if head["v"] == 2:
        tasks = _chunked(_records(unpacker, view, counts[0], False), cache, intern)
    else:   # 3 carried the tasks' digest sum, 4 and 5 carry the roll (digest.py)
        key = "tasks_sum" if head["v"] == 3 else "roll"
        if not isinstance(head.get(key), bytes) or len(head[key]) != 16:
            raise DecodeError(f"snapshot without the digest's {key}")
        return (head, _chunks(unpacker, counts[0], cache, intern),
                _requests(unpacker, counts[1], head["v"] == 3,
                          times if head["v"] >= 5 else None), times)
    return head, tasks, map(_first, _records(unpacker, view, counts[1], True)), times


def _chunks(unpacker: msgpack.Unpacker, count: int, cache: dict,
            intern: Callable[[str], str]) -> Iterator[TaskChunk]:
    left = count
    while left > 0:
        try:
            chunk = unpacker.unpack()
        except Exception as exc:
            raise DecodeError(f"snapshot records: {exc.__class__.__name__}") from None
        tasks = tasks_of_chunk(chunk, cache, intern)
        if not 0 < len(tasks) <= min(left, TASK_CHUNK):
            raise DecodeError("snapshot task rows do not match their count")
        left -= len(tasks)
        yield tasks, None


def _requests(unpacker: msgpack.Unpacker, count: int, hashed: bool,
              times: list | None) -> Iterator[Any]:
    """The request records; with `times` (format 5), their runs are read into it."""
    try:
        records = unpacker.unpack()
        hashes = unpacker.unpack() if hashed else b"\0" * (16 * count)
        runs = unpacker.unpack() if times is not None else None
    except Exception as exc:
        raise DecodeError(f"snapshot requests: {exc.__class__.__name__}") from None
    if type(records) is not tuple or len(records) != count or type(hashes) is not bytes \
            or len(hashes) != 16 * count:
        raise DecodeError("snapshot requests do not match their count")
    if times is not None:
        times.extend(_runs(runs, count))
    if _left(unpacker):
        raise DecodeError("trailing bytes after the snapshot's records")
    yield from records


def _runs(runs: object, count: int) -> list:
    """The request table's times, checked: runs [ms, count > 0], ms ascending, `count` in
    all (apply relies on it: the oldest entry first)."""
    out: list = []
    total, last = 0, -2   # -1: untimed entries (request_table.UNTIMED_MS), first
    for run in runs if type(runs) is tuple else ((),):
        if type(run) is not tuple or len(run) != 2 or type(run[0]) is not int \
                or type(run[1]) is not int or run[0] <= last or run[1] <= 0:
            raise DecodeError("snapshot request times are not ascending runs")
        last, total = run[0], total + run[1]
        out.append([run[0], run[1]])
    if total != count:
        raise DecodeError("snapshot request times do not match their count")
    return out


def _left(unpacker: msgpack.Unpacker) -> bool:
    try:
        unpacker.unpack()
    except msgpack.OutOfData:
        return False
    except Exception:
        return True
    return True


def _chunked(records: Iterable[tuple[Any, Encoded]], cache: dict,
             intern: Callable[[str], str]) -> Iterator[TaskChunk]:
    """Format 1 and 2 records, one by one, as Tasks in chunks with their encodings."""
    tasks, encodings = [], []
    for record, encoded in records:
        tasks.append(task_from(record, cache, intern))
        encodings.append(encoded)
        if len(tasks) == TASK_CHUNK:
            yield tasks, encodings
            tasks, encodings = [], []
    if tasks:
        yield tasks, encodings


def _records(unpacker: msgpack.Unpacker, view: memoryview, count: int,
             last: bool) -> Iterator[tuple[Any, memoryview]]:
    start = unpacker.tell()
    for _ in range(count):
        try:
            record = unpacker.unpack()
        except Exception as exc:
            raise DecodeError(f"snapshot records: {exc.__class__.__name__}") from None
        end = unpacker.tell()
        yield record, view[start:end]
        start = end
    if last and start != len(view):
        raise DecodeError("trailing bytes after the snapshot's records")


def _records_v1(records: Iterable[Any]) -> Iterator[tuple[Any, bytes]]:
    for record in records:
        yield record, pack(record)
