"""Bytes in and out of the state machine: command batches and snapshots (msgpack).

The only module that uses msgpack. A batch: see `BATCH_FORMAT`; decoding checks the
structure and raises `DecodeError`; field *values* are checked at apply time.

`pack(record)` is the canonical encoding of a record (records.py), which the state digest
hashes (digest.py). A snapshot (format 4) is a msgpack map of counters and plain lists in a
canonical order (tenants and schedules sorted, the record counts, the digest's `roll` and
the `state_digest`), then the tasks in seq order in chunks of up to `TASK_CHUNK` rows
(`records.task_chunk`), then an array of the request records in table order: equal states
encode to equal bytes. Formats 1-3 are read (3: the head has `tasks_sum` instead of the
roll, and the request records are followed by their item hashes, one bin of 16 bytes each).
"""
from __future__ import annotations

import dataclasses
import inspect
import operator
from collections.abc import Iterator
from itertools import islice

import msgpack

from . import commands as c
from .errors import DecodeError
from .limits import Limits
from .records import (request_record, retry_from, retry_record, schedule_from,
                      schedule_record, task_chunk, task_from, task_record, tasks_of_chunk,
                      template_from, template_record, tenant_from, tenant_record)

__all__ = ["DecodeError", "encode_batch", "decode_batch", "encode_snapshot", "decode_snapshot",
           "pack", "request_record", "retry_from", "retry_record", "schedule_from",
           "schedule_record", "task_from", "task_record", "template_from", "template_record",
           "tenant_from", "tenant_record"]

SNAPSHOT_VERSION = 4
SNAPSHOT_VERSIONS_READ = (1, 2, 3, 4)   # 1: the tasks were a list inside the map; 2: one by one
TASK_CHUNK = 4096                    # task records per array in a format 3 or 4 snapshot
BATCH_COMMANDS_MAX = Limits().batch_commands_max   # one bound for encode and decode

_TAGS: dict[str, type[c.Command]] = {cls.__name__: cls for cls in c.COMMAND_TYPES}
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in c.COMMAND_TYPES}
_REQUIRED = {cls: frozenset(f.name for f in dataclasses.fields(cls)
                            if f.default is dataclasses.MISSING
                            and f.default_factory is dataclasses.MISSING)
             for cls in c.COMMAND_TYPES}
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
        if (added := _ADDED_LATER.get(cls)) and item[-len(added):] == added:
            del item[-len(added):]   # fields added later, at their defaults: an older node's bytes
        out.append(item)
    return msgpack.packb(out, use_bin_type=True)


def _need(value, kind: type, name: str) -> None:
    """Refuse at encoding what decoding would refuse: such an entry must not reach a log."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be a {kind.__name__}, not {type(value).__name__}")


def _retry(value) -> c.RetryPolicy:
    if not isinstance(value, dict) or not value.keys() <= _RETRY_FIELD_SET:
        raise DecodeError("retry must be a map of RetryPolicy fields")
    if not all(type(v) is int or type(v) is str for v in value.values()):
        return c.RetryPolicy(**value)   # 1, 1.0 and True are equal but must stay distinct
    key = tuple(value.items())
    policy = _retry_cache.get(key)
    if policy is None:
        policy = c.RetryPolicy(**value)
        if len(_retry_cache) >= _RETRY_CACHED_MAX:
            _retry_cache.clear()
        _retry_cache[key] = policy
    return policy


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


def decode_batch(blob: bytes) -> c.Batch:
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
        batch = c.Batch([_positional(item) for item in islice(items, 1, None)])
    elif len(items) > BATCH_COMMANDS_MAX:
        raise DecodeError(f"a batch holds at most {BATCH_COMMANDS_MAX} commands")
    else:
        batch = c.Batch([_command(item) for item in items])
    batch.raw = blob
    return batch


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
_ADDED_LATER: dict[type, list] = {c.Fire: [None]}   # defaults of fields added last (Fire.shard)
_first = operator.itemgetter(0)   # mapped lazily: compiled, a returned genexp becomes a list


def _positional(item) -> c.Command:
    if not isinstance(item, list) or not item:
        raise DecodeError("a command is [type, value, ...]")
    tag = item[0]
    found = _MAKERS.get(tag) if isinstance(tag, str) else None
    if found is None:
        raise DecodeError(f"unknown command type {tag!r}")
    cls, size, make = found
    if len(item) != size and len(item + _ADDED_LATER.get(cls, [])) != size:
        raise DecodeError(f"{tag} has {size - 1} fields")
    item = item + _ADDED_LATER.get(cls, [])[:size - len(item)]   # written before they existed
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


def pack(record) -> bytes:
    """The canonical encoding of a record (what the digest hashes)."""
    return msgpack.packb(record, use_bin_type=True)


# --- snapshots ----------------------------------------------------------------------------------

def encode_snapshot(head: dict, tasks, requests) -> bytes:
    """`head`: {"v", "seq", "now_ms", "cluster_token", "task_seq", "tenants", "schedules",
    "roll", "state_digest"} with record lists in canonical order; `tasks`: a sized iterable
    of Tasks in seq order; `requests`: the request table (an ordered mapping). One Packer
    appends everything to one buffer: the head (with both counts), the tasks in chunks of
    `TASK_CHUNK` rows, an array of the request records."""
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
    return packer.bytes()


def decode_snapshot(blob: bytes, intern=lambda s: s) -> tuple[dict, Iterator, Iterator]:
    """(head, tasks, requests): two iterators, to be consumed in that order. `tasks` yields
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
    if head["v"] == 1:
        return (head, _chunked(_records_v1(head.get("tasks", ())), cache, intern),
                map(_first, _records_v1(head.get("requests", ()))))
    counts = head.get("task_count", -1), head.get("request_count", -1)
    if any(type(n) is not int or n < 0 for n in counts):
        raise DecodeError("snapshot without record counts")
    view = memoryview(blob)
    if head["v"] == 2:
        tasks = _chunked(_records(unpacker, view, counts[0], False), cache, intern)
    else:   # 3 carried the tasks' digest sum, 4 carries the roll (digest.py)
        key = "tasks_sum" if head["v"] == 3 else "roll"
        if not isinstance(head.get(key), bytes) or len(head[key]) != 16:
            raise DecodeError(f"snapshot without the digest's {key}")
        return (head, _chunks(unpacker, counts[0], cache, intern),
                _requests(unpacker, counts[1], hashed=head["v"] == 3))
    return head, tasks, map(_first, _records(unpacker, view, counts[1], True))


def _chunks(unpacker, count: int, cache: dict, intern):
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


def _requests(unpacker, count: int, hashed: bool):
    try:
        records = unpacker.unpack()
        hashes = unpacker.unpack() if hashed else b"\0" * (16 * count)
    except Exception as exc:
        raise DecodeError(f"snapshot requests: {exc.__class__.__name__}") from None
    if type(records) is not tuple or len(records) != count or type(hashes) is not bytes \
            or len(hashes) != 16 * count:
        raise DecodeError("snapshot requests do not match their count")
    if _left(unpacker):
        raise DecodeError("trailing bytes after the snapshot's records")
    yield from records


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
