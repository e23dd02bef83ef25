"""Bytes in and out of the state machine: command batches and snapshots (msgpack).

This is the only module that uses msgpack. A batch is a msgpack list of
`[type_tag, {field: value}]` pairs; `RetryPolicy` and `TaskTemplate` values travel as
field maps too. Decoding checks the structure (known tags, known fields, required fields
present) and raises `DecodeError` otherwise; field *values* are checked at apply time,
where a bad one becomes an `invalid_argument` result.

Records (`task_record`, ...) are flat msgpack arrays; `pack(record)` is their canonical
encoding, which the digest hashes (digest.py). A snapshot (format 3) is a msgpack map of
counters and plain lists in a canonical order (tenants and schedules sorted, the record
counts, `tasks_sum`: the tasks' part of the digest), then the tasks in seq order in chunks
of up to `TASK_CHUNK` rows (one C call decodes a chunk; repeated strings and retry
policies are indexes into the chunk's tables, see `_task_chunk`), then an array of the
request records in table order and their item hashes (one bin, 16 bytes each). So equal
states encode to equal bytes. Restoring a million tasks is a decode and an object per
task: no item hash is recomputed (digest.py says why that is safe). Formats 1 and 2 (one
canonical record per task and request, hashed on load) are still read.
"""
from __future__ import annotations

import dataclasses
import inspect
import operator
from itertools import islice

import msgpack

from . import commands as c
from .limits import Limits
from .model import STATES, Attempt, FireRecord, Schedule, Task, TenantView

SNAPSHOT_VERSION = 3
SNAPSHOT_VERSIONS_READ = (1, 2, 3)   # 1: the tasks were a list inside the map; 2: one by one
TASK_CHUNK = 4096                    # task records per array in a format 3 snapshot
BATCH_COMMANDS_MAX = Limits().batch_commands_max   # one bound for encode and decode


class DecodeError(ValueError):
    """The bytes are not a batch of known commands."""


_TAGS: dict[str, type[c.Command]] = {cls.__name__: cls for cls in c.COMMAND_TYPES}
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in c.COMMAND_TYPES}
_REQUIRED = {
    cls: frozenset(f.name for f in dataclasses.fields(cls)
                   if f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING)
    for cls in c.COMMAND_TYPES
}
_FIELD_SETS = {cls: frozenset(names) for cls, names in _FIELDS.items()}
_RETRY_FIELDS = tuple(f.name for f in dataclasses.fields(c.RetryPolicy))
_RETRY_FIELD_SET = frozenset(_RETRY_FIELDS)
# Decoded RetryPolicy values by their field map: nearly every submit carries one of a few
# policies, and the frozen dataclass costs more to build than to look up. Only maps of
# exact ints and strs are kept (1, 1.0 and True compare equal but must stay distinct).
_RETRY_CACHED_MAX = 256
_retry_cache: dict[tuple, c.RetryPolicy] = {}
_TEMPLATE_FIELDS = tuple(f.name for f in dataclasses.fields(c.TaskTemplate))


# --- commands --------------------------------------------------------------------------------

def _plain(value):
    if isinstance(value, c.RetryPolicy):
        return {n: getattr(value, n) for n in _RETRY_FIELDS}
    if isinstance(value, c.TaskTemplate):
        return {n: _plain(getattr(value, n)) for n in _TEMPLATE_FIELDS}
    if isinstance(value, tuple):
        return list(value)
    return value


# Batch format 2: [2, [tag, value, ...], ...], the values in the command's field order
# (`dataclasses.fields`), a RetryPolicy as its record (`retry_record`), a TaskTemplate as a
# field map. Format 1, still read: [[tag, {field: value}], ...]. Positions instead of
# names halve an entry and let decoding set slots directly instead of calling __init__
# with keywords (a 500-submit batch decoded in about 40% of the time).
BATCH_FORMAT = 2
_GETTERS = {cls: operator.attrgetter(*_FIELDS[cls]) for cls in c.COMMAND_TYPES}
_SPECIAL = ("retry", "template", "task_types")   # fields whose values are converted
_SPECIAL_AT = {cls: tuple((i + 1, n) for i, n in enumerate(_FIELDS[cls]) if n in _SPECIAL)
               for cls in c.COMMAND_TYPES}


def encode_batch(cmds: list[c.Command]) -> bytes:
    if len(cmds) > BATCH_COMMANDS_MAX:
        raise ValueError(f"a batch holds at most {BATCH_COMMANDS_MAX} commands")
    out: list = [BATCH_FORMAT]
    for cmd in cmds:
        cls = type(cmd)
        getter = _GETTERS.get(cls)
        if getter is None:
            raise TypeError(f"not a command: {cls.__name__}")
        item = [cls.__name__, *getter(cmd)]
        for i, name in _SPECIAL_AT[cls]:
            value = item[i]
            if name == "retry":
                _need(value, c.RetryPolicy, name)
                item[i] = retry_record(value)
            elif name == "template":
                _need(value, c.TaskTemplate, name)
                _need(value.retry, c.RetryPolicy, "template.retry")
                item[i] = _plain(value)
            else:
                item[i] = _plain(value)
        out.append(item)
    return msgpack.packb(out, use_bin_type=True)


def _need(value, kind: type, name: str) -> None:
    """Refuse at encoding what decoding would refuse: such an entry must not reach a log."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be a {kind.__name__}, not {type(value).__name__}")


def _retry(value) -> c.RetryPolicy:
    if not isinstance(value, dict) or not value.keys() <= _RETRY_FIELD_SET:
        raise DecodeError("retry must be a map of RetryPolicy fields")
    if not _cacheable(value):
        return c.RetryPolicy(**value)
    key = tuple(value.items())
    policy = _retry_cache.get(key)
    if policy is None:
        policy = c.RetryPolicy(**value)
        if len(_retry_cache) >= _RETRY_CACHED_MAX:
            _retry_cache.clear()
        _retry_cache[key] = policy
    return policy


def _cacheable(value: dict) -> bool:
    for v in value.values():
        if type(v) is not int and type(v) is not str:
            return False
    return True


def _template(value) -> c.TaskTemplate:
    if not isinstance(value, dict) or not set(value) <= set(_TEMPLATE_FIELDS) \
            or "task_type" not in value:
        raise DecodeError("template must be a map of TaskTemplate fields")
    fields = dict(value)
    if "retry" in fields:
        fields["retry"] = _retry(fields["retry"])
    return c.TaskTemplate(**fields)


def _command(item) -> c.Command:
    if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], dict):
        raise DecodeError("a command is [type, {fields}]")
    tag, fields = item
    cls = _TAGS.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise DecodeError(f"unknown command type {tag!r}")
    names = fields.keys()
    # The field names are strs, so being a subset of them also rules out non-str keys.
    if not names <= _FIELD_SETS[cls]:
        raise DecodeError(f"unknown fields in {tag}")
    if not _REQUIRED[cls] <= names:
        raise DecodeError(f"missing fields in {tag}: {sorted(_REQUIRED[cls] - names)}")
    fields = dict(fields)
    if "retry" in fields:
        fields["retry"] = _retry(fields["retry"])
    if "template" in fields:
        fields["template"] = _template(fields["template"])
    if isinstance(fields.get("task_types"), list):
        fields["task_types"] = tuple(fields["task_types"])
    if "timeout_ms" in fields:
        fields["timeout_ms"] = _shared_timeout(fields["timeout_ms"])
    return cls(**fields)


# A task keeps its timeout_ms for life, and a decoded int above 256 is a fresh 32-byte
# object per command: nearly every task carries one of a few timeouts, so tasks share one
# object per value (32 MB at a million pending tasks). Exact ints only (True == 1).
_TIMEOUTS_SHARED_MAX = 256
_timeouts: dict[int, int] = {}


def _shared_timeout(value):
    if type(value) is not int:
        return value
    shared = _timeouts.get(value)
    if shared is None:
        if len(_timeouts) >= _TIMEOUTS_SHARED_MAX:
            _timeouts.clear()
        shared = _timeouts[value] = value
    return shared


def decode_batch(blob: bytes) -> list[c.Command]:
    try:
        items = msgpack.unpackb(blob, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # msgpack raises several unrelated types on junk
        raise DecodeError(f"not msgpack: {exc.__class__.__name__}") from None
    if not isinstance(items, list):
        raise DecodeError("a batch is a list")
    if items and type(items[0]) is int:
        if items[0] != BATCH_FORMAT:
            raise DecodeError(f"unknown batch format {items[0]}")
        if len(items) - 1 > BATCH_COMMANDS_MAX:
            raise DecodeError(f"a batch holds at most {BATCH_COMMANDS_MAX} commands")
        return [_positional(item) for item in islice(items, 1, None)]
    if len(items) > BATCH_COMMANDS_MAX:
        raise DecodeError(f"a batch holds at most {BATCH_COMMANDS_MAX} commands")
    return [_command(item) for item in items]


def _maker(cls):
    """A function that builds a `cls` from a format 2 item (its values after the tag) by
    setting its slots, as the dataclass __init__ would (no command has __post_init__)."""
    names = _FIELDS[cls]
    setters = {f"_set{i}": inspect.getattr_static(cls, n).__set__ for i, n in enumerate(names)}
    body = "".join(f"    _set{i}(o, item[{i + 1}])\n" for i in range(len(names)))
    src = f"def make(item):\n    o = _new(_cls)\n{body}    return o\n"
    scope = {"_new": object.__new__, "_cls": cls, **setters}
    exec(src, scope)   # noqa: S102 - generated from the dataclass's own field names
    return scope["make"]


assert not any(hasattr(cls, "__post_init__") for cls in c.COMMAND_TYPES)
_MAKERS = {cls.__name__: (cls, len(_FIELDS[cls]) + 1, _maker(cls)) for cls in c.COMMAND_TYPES}


def _positional(item) -> c.Command:
    if not isinstance(item, list) or not item:
        raise DecodeError("a command is [type, value, ...]")
    tag = item[0]
    found = _MAKERS.get(tag) if isinstance(tag, str) else None
    if found is None:
        raise DecodeError(f"unknown command type {tag!r}")
    cls, size, make = found
    if len(item) != size:
        raise DecodeError(f"{tag} has {size - 1} fields, not {len(item) - 1}")
    for i, name in _SPECIAL_AT[cls]:
        value = item[i]
        if name == "retry":
            item[i] = _retry_positional(value)
        elif name == "template":
            item[i] = _template(value)
        elif isinstance(value, list):   # task_types
            item[i] = tuple(value)
    cmd = make(item)
    if cls is c.SubmitTask:
        object.__setattr__(cmd, "timeout_ms", _shared_timeout(cmd.timeout_ms))
    return cmd


_retry_by_record: dict[tuple, c.RetryPolicy] = {}


def _retry_positional(value) -> c.RetryPolicy:
    if not isinstance(value, list) or len(value) != len(_RETRY_FIELDS):
        raise DecodeError("retry must be [backoff, base_ms, max_ms, multiplier_milli, "
                          "jitter_permille]")
    for v in value:   # only exact ints and strs share a policy (1, 1.0 and True are equal)
        if type(v) is not int and type(v) is not str:
            return c.RetryPolicy(**dict(zip(_RETRY_FIELDS, value)))
    key = tuple(value)
    policy = _retry_by_record.get(key)
    if policy is None:
        if len(_retry_by_record) >= _RETRY_CACHED_MAX:
            _retry_by_record.clear()
        policy = _retry_by_record[key] = c.RetryPolicy(**dict(zip(_RETRY_FIELDS, value)))
    return policy


# --- records (snapshot parts) --------------------------------------------------------------------

def retry_record(p: c.RetryPolicy) -> list:
    return [p.backoff, p.base_ms, p.max_ms, p.multiplier_milli, p.jitter_permille]


def retry_from(r, cache: dict) -> c.RetryPolicy:
    key = r if type(r) is tuple else tuple(r)
    policy = cache.get(key)
    if policy is None:
        policy = cache[key] = c.RetryPolicy(backoff=r[0], base_ms=r[1], max_ms=r[2],
                                            multiplier_milli=r[3], jitter_permille=r[4])
    return policy


def task_record(t: Task) -> list:
    attempts = [[a.attempt, a.worker_id, a.fencing_token, a.started_at_ms, a.ended_at_ms,
                 a.outcome, a.error] for a in t._attempts] if t._attempts else ()
    return [t.seq, t.task_id, t.tenant, t.task_type, t.payload_json, t.priority, t.run_at_ms,
            t.state, t.attempt, t.max_retries, retry_record(t.retry), t.timeout_ms,
            t.idempotency_key, t.schedule_id, t.lease_expires_at_ms, t.fencing_token,
            t.worker_id, t.cancel_requested, t.last_error, t.result_json, t.created_at_ms,
            t.started_at_ms, t.completed_at_ms, t.failures, attempts]


_new_task = Task.__new__
_STATES = {state: state for state in STATES}   # one string object per state, not per task


def task_from(r, cache: dict, intern=lambda s: s) -> Task:
    """A Task from its record (a list or tuple), slot by slot: restore builds a million.
    Equal times and timeouts share one int object (a decoded int is a fresh 32-byte object
    per field, and created_at/run_at are mostly equal), as they do in a node that applied
    the submits."""
    (seq, task_id, tenant, task_type, payload_json, priority, run_at_ms, state, attempt,
     max_retries, retry, timeout_ms, idempotency_key, schedule_id, lease_expires_at_ms,
     fencing_token, worker_id, cancel_requested, last_error, result_json, created_at_ms,
     started_at_ms, completed_at_ms, failures, attempts) = r
    t = _new_task(Task)
    t.task_id = task_id
    t.tenant = intern(tenant)
    t.task_type = intern(task_type)
    t.payload_json = payload_json
    t.priority = priority
    shared = cache.get(created_at_ms)
    if shared is None:
        shared = _share(cache, created_at_ms)
    t.created_at_ms = shared
    t.run_at_ms = shared if run_at_ms == shared else run_at_ms
    t.state = _STATES.get(state, state)
    t.attempt = attempt
    t.max_retries = max_retries
    t.retry = retry_from(retry, cache)
    t.timeout_ms = cache.get(timeout_ms) or _share(cache, timeout_ms)
    t.idempotency_key = idempotency_key
    t.schedule_id = schedule_id
    t.lease_expires_at_ms = lease_expires_at_ms
    t.fencing_token = fencing_token
    t.worker_id = worker_id
    t.cancel_requested = cancel_requested
    t.last_error = last_error
    t.result_json = result_json
    t.started_at_ms = started_at_ms
    t.completed_at_ms = completed_at_ms
    t._attempts = [Attempt(*a) for a in attempts] if attempts else None
    t.seq = seq
    t.failures = failures
    t.qver = 0
    t.dh = None
    return t


_SHARED_INTS_MAX = 4096


def _share(cache: dict, value):
    """`value` as the object kept for it in `cache` (bounded: cleared when full). Only
    exact ints are shared: True == 1 but must stay a bool."""
    if type(value) is not int:
        return value
    if len(cache) >= _SHARED_INTS_MAX:
        cache.clear()
    cache[value] = value
    return value


# --- format 3 task rows: records with the repeated values as indexes -------------------------
#
# A chunk is [strings, retry records, rows]: tenant, task type, state, worker id and
# schedule id are indexes into the chunk's strings (or nil), the retry policy an index into
# its retry records, and run_at_ms is nil when it equals created_at_ms. Decoding then makes
# a fresh object only for what is unique to a task (id, payload, seq, times).

def _task_chunk(tasks: list[Task]) -> list:
    """One chunk of rows. The lookups are inlined (a snapshot child runs this per task):
    `sd(value, len(strs))` is the value's index, a new one for a value not seen yet."""
    strs: dict[str, int] = {}
    sd = strs.setdefault
    retries: dict[tuple, int] = {}   # by exact field types and values (1 and True differ)
    retry_of: dict[int, int] = {}    # id(policy) -> its index: tasks share a few policies
    rows = []
    append = rows.append
    for t in tasks:
        retry = retry_of.get(id(t.retry))
        if retry is None:
            key = tuple((type(v), v) for v in retry_record(t.retry))
            retry = retry_of[id(t.retry)] = retries.setdefault(key, len(retries))
        run_at, created, schedule_id, worker_id = (t.run_at_ms, t.created_at_ms,
                                                   t.schedule_id, t.worker_id)
        append([t.seq, t.task_id, sd(t.tenant, len(strs)), sd(t.task_type, len(strs)),
                t.payload_json, t.priority, None if run_at == created else run_at,
                sd(t.state, len(strs)), t.attempt, t.max_retries, retry, t.timeout_ms,
                t.idempotency_key,
                None if schedule_id is None else sd(schedule_id, len(strs)),
                t.lease_expires_at_ms, t.fencing_token,
                None if worker_id is None else sd(worker_id, len(strs)),
                t.cancel_requested, t.last_error, t.result_json, created, t.started_at_ms,
                t.completed_at_ms, t.failures,
                [[a.attempt, a.worker_id, a.fencing_token, a.started_at_ms, a.ended_at_ms,
                  a.outcome, a.error] for a in t._attempts] if t._attempts else ()])
    return [list(strs), [[v for _, v in key] for key in retries], rows]


def _tasks_of_chunk(chunk, cache: dict, intern) -> list[Task]:
    """The Tasks of one format 3 chunk, slot by slot (a restore builds a million). It
    repeats `task_from`'s slot assignments on purpose, with the chunk's tables looked up in
    place: calling a helper per task would add a million calls to a 1M-task restore."""
    try:
        strs, retry_records, rows = chunk
        strs = [intern(_STATES.get(v, v)) if type(v) is str else _bad(v) for v in strs]
        retries = [retry_from(r, cache) for r in retry_records]
        out = []
        for (seq, task_id, tenant, task_type, payload_json, priority, run_at_ms, state,
             attempt, max_retries, retry, timeout_ms, idempotency_key, schedule_id,
             lease_expires_at_ms, fencing_token, worker_id, cancel_requested, last_error,
             result_json, created_at_ms, started_at_ms, completed_at_ms, failures,
             attempts) in rows:
            t = _new_task(Task)
            t.task_id = task_id
            t.tenant = strs[tenant]
            t.task_type = strs[task_type]
            t.payload_json = payload_json
            t.priority = priority
            shared = cache.get(created_at_ms)
            if shared is None:
                shared = _share(cache, created_at_ms)
            t.created_at_ms = shared
            t.run_at_ms = shared if run_at_ms is None else run_at_ms
            t.state = strs[state]
            t.attempt = attempt
            t.max_retries = max_retries
            t.retry = retries[retry]
            t.timeout_ms = cache.get(timeout_ms) or _share(cache, timeout_ms)
            t.idempotency_key = idempotency_key
            t.schedule_id = None if schedule_id is None else strs[schedule_id]
            t.lease_expires_at_ms = lease_expires_at_ms
            t.fencing_token = fencing_token
            t.worker_id = None if worker_id is None else strs[worker_id]
            t.cancel_requested = cancel_requested
            t.last_error = last_error
            t.result_json = result_json
            t.started_at_ms = started_at_ms
            t.completed_at_ms = completed_at_ms
            t._attempts = [Attempt(*a) for a in attempts] if attempts else None
            t.seq = seq
            t.failures = failures
            t.qver = 0
            t.dh = None
            out.append(t)
        return out
    except DecodeError:
        raise
    except (TypeError, ValueError, IndexError) as exc:
        raise DecodeError(f"snapshot task rows: {exc.__class__.__name__}") from None


def _bad(value):
    raise DecodeError(f"snapshot strings: {type(value).__name__}")


def template_record(t: c.TaskTemplate) -> list:
    return [t.task_type, t.payload_json, t.priority, t.timeout_ms, t.max_retries,
            retry_record(t.retry)]


def template_from(r: list, cache: dict) -> c.TaskTemplate:
    return c.TaskTemplate(task_type=r[0], payload_json=r[1], priority=r[2], timeout_ms=r[3],
                          max_retries=r[4], retry=retry_from(r[5], cache))


def schedule_record(s: Schedule) -> list:
    return [s.tenant, s.schedule_id, s.cron, s.timezone, template_record(s.template), s.overlap,
            s.misfire, s.catchup_window_ms, s.paused, s.start_at_ms, s.end_at_ms, s.jitter_ms,
            s.next_fire_ms, s.created_at_ms, s.updated_at_ms,
            [[f.fire_ms, f.outcome, f.task_id] for f in s.fires]]


def schedule_from(r: list, cache: dict) -> Schedule:
    (tenant, schedule_id, cron, tz, template, overlap, misfire, catchup, paused, start_at,
     end_at, jitter, next_fire, created, updated, fires) = r
    return Schedule(tenant, schedule_id, cron, tz, template_from(template, cache), overlap,
                    misfire, catchup, paused, start_at, end_at, jitter, next_fire, created,
                    updated, [FireRecord(*f) for f in fires])


def tenant_record(v: TenantView) -> list:
    return [v.tenant, v.max_running, v.weight, v.service]


def tenant_from(r: list) -> TenantView:
    view = TenantView(r[0], r[1], r[2])
    view.service = r[3]
    return view


def request_record(request_id: str, rec: tuple) -> list:
    return [request_id, list(rec)]


def pack(record) -> bytes:
    """The canonical encoding of a record (what the digest hashes)."""
    return msgpack.packb(record, use_bin_type=True)


# --- snapshots ----------------------------------------------------------------------------------

def encode_snapshot(head: dict, tasks, requests, request_hashes) -> bytes:
    """`head`: {"v", "seq", "now_ms", "cluster_token", "task_seq", "tenants", "schedules",
    "tasks_sum"} with record lists in canonical order; `tasks`: a sized iterable of Tasks in
    seq order; `requests`: the request table (an ordered mapping) and `request_hashes` their
    item hashes in the same order. One Packer appends everything to one buffer: the head
    (with both counts), the tasks in chunks of `TASK_CHUNK` rows, an array of the request
    records, their hashes as one bin of 16 bytes each."""
    packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    packer.pack(dict(head, task_count=len(tasks), request_count=len(requests)))
    pack_one = packer.pack
    chunk: list = []
    for task in tasks:
        chunk.append(task)
        if len(chunk) == TASK_CHUNK:
            pack_one(_task_chunk(chunk))
            chunk = []
    if chunk:
        pack_one(_task_chunk(chunk))
    pack_one([request_record(request_id, rec) for request_id, rec in requests.items()])
    pack_one(b"".join(h.to_bytes(16, "big") for h in request_hashes))
    return packer.bytes()


def decode_snapshot(blob: bytes, intern=lambda s: s) -> tuple[dict, object, object]:
    """(head, tasks, requests): two iterators, to be consumed in that order. `tasks` yields
    (Tasks, encodings): a list of Tasks in seq order, and their records' canonical bytes
    (memoryviews) when the format has them (1 and 2), else None; `requests` yields
    (record, its item hash as an int (3) or its canonical bytes (1, 2)). `intern` is
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
    if head["v"] == 1:
        return (head, _chunked(_records_v1(head.get("tasks", ())), cache, intern),
                _records_v1(head.get("requests", ())))
    counts = head.get("task_count"), head.get("request_count")
    if any(type(n) is not int or n < 0 for n in counts):
        raise DecodeError("snapshot without record counts")
    view = memoryview(blob)
    if head["v"] == 2:
        tasks = _chunked(_records(unpacker, view, counts[0], False), cache, intern)
    else:
        if not isinstance(head.get("tasks_sum"), bytes) or len(head["tasks_sum"]) != 16:
            raise DecodeError("snapshot without the tasks' digest sum")
        return (head, _chunks(unpacker, counts[0], cache, intern),
                _requests(unpacker, counts[1]))
    return head, tasks, _records(unpacker, view, counts[1], True)


def _chunks(unpacker, count: int, cache: dict, intern):
    left = count
    while left > 0:
        try:
            chunk = unpacker.unpack()
        except Exception as exc:
            raise DecodeError(f"snapshot records: {exc.__class__.__name__}") from None
        tasks = _tasks_of_chunk(chunk, cache, intern)
        if not 0 < len(tasks) <= min(left, TASK_CHUNK):
            raise DecodeError("snapshot task rows do not match their count")
        left -= len(tasks)
        yield tasks, None


def _requests(unpacker, count: int):
    try:
        records, hashes = unpacker.unpack(), unpacker.unpack()
    except Exception as exc:
        raise DecodeError(f"snapshot requests: {exc.__class__.__name__}") from None
    if type(records) is not tuple or len(records) != count or type(hashes) is not bytes \
            or len(hashes) != 16 * count:
        raise DecodeError("snapshot requests do not match their count")
    if _left(unpacker):
        raise DecodeError("trailing bytes after the snapshot's records")
    for i, record in enumerate(records):
        yield record, int.from_bytes(hashes[16 * i:16 * i + 16], "big")


def _left(unpacker) -> bool:
    try:
        unpacker.unpack()
    except msgpack.OutOfData:
        return False
    except Exception:
        return True
    return True


def _chunked(records, cache: dict, intern):
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


def _records(unpacker, view: memoryview, count: int, last: bool):
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


def _records_v1(records):
    for record in records:
        yield record, pack(record)
