"""Bytes in and out of the state machine: command batches and records (msgpack).

With snapshot_format.py, the only modules that use msgpack. A batch: see `BATCH_FORMAT`; decoding checks the
structure and raises `DecodeError`; field *values* are checked at apply time.

`pack(record)` is the canonical encoding of a record (records.py), which the state digest
hashes (digest.py). Snapshots' bytes: snapshot_format.py.
"""
from __future__ import annotations

import dataclasses
import inspect
import operator
from collections.abc import Callable
from itertools import islice
from typing import Any

import msgpack

from . import commands as c
from .errors import DecodeError
from .limits import Limits
from .records import (request_record, retry_from, retry_record, schedule_from,
                      schedule_record, task_from, task_record, template_from, template_record, tenant_from, tenant_record)

__all__ = ["DecodeError", "encode_batch", "decode_batch",
           "pack", "request_record", "retry_from", "retry_record", "schedule_from",
           "schedule_record", "task_from", "task_record", "template_from", "template_record",
           "tenant_from", "tenant_record"]

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

def _plain(value: object) -> object:
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
_SPECIAL = ("retry", "template", "task_types", "tier_weights", "limits", "steps",
            "templates")   # values converted
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
        if added := _ADDED_LATER.get(cls):   # fields added later, at their defaults, last
            _drop_defaults(item, added)     # first: an older node reads these bytes
        out.append(item)
    return msgpack.packb(out, use_bin_type=True)


def _drop_defaults(item: list, added: list) -> None:
    """Drop the trailing fields of `added` (the defaults of the fields added last) that
    hold their default, from the end."""
    i = len(added)
    while i > 0:                     # (a reversed() loop here trips mypyc)
        i -= 1
        if item[-1] is not added[i] and item[-1] != added[i]:
            return
        item.pop()


def _need(value: object, kind: type, name: str) -> None:
    """Refuse at encoding what decoding would refuse: such an entry must not reach a log."""
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be a {kind.__name__}, not {type(value).__name__}")


def _retry(value: object) -> c.RetryPolicy:
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


def _template(value: object) -> c.TaskTemplate:
    if not isinstance(value, dict) or not set(value) <= set(_TEMPLATE_FIELDS) \
            or "task_type" not in value:
        raise DecodeError("template must be a map of TaskTemplate fields")
    fields = dict(value)
    if "retry" in fields:
        fields["retry"] = _retry(fields["retry"])
    return c.TaskTemplate(**fields)


def _command(item: object) -> c.Command:
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
    for name in ("task_types", "limits"):
        if isinstance(fields.get(name), list):
            fields[name] = tuple(fields[name])
    if "tier_weights" in fields:
        fields["tier_weights"] = _triples(fields["tier_weights"])
    for name in ("steps", "templates"):
        if name in fields:
            fields[name] = _rows(fields[name])
    if "timeout_ms" in fields:
        fields["timeout_ms"] = _shared_timeout(fields["timeout_ms"])
    return cls(**fields)


# A task keeps its timeout_ms for life, and a decoded int above 256 is a fresh 32-byte
# object per command: nearly every task carries one of a few timeouts, so tasks share one
# object per value (32 MB at a million pending tasks). Exact ints only (True == 1).
_TIMEOUTS_SHARED_MAX = 256
_timeouts: dict[int, int] = {}


def _shared_timeout(value: object) -> object:
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


def _maker(cls: type[c.Command]) -> Callable[[list[Any]], Any]:
    """A function that builds a `cls` from a format 2 item (its values after the tag) by
    setting its slots, as the dataclass __init__ would (no command has __post_init__)."""
    names = _FIELDS[cls]
    setters = {f"_set{i}": inspect.getattr_static(cls, n).__set__ for i, n in enumerate(names)}
    body = "".join(f"    _set{i}(o, item[{i + 1}])\n" for i in range(len(names)))
    src = f"def make(item):\n    o = _new(_cls)\n{body}    return o\n"
    scope: dict[str, Any] = {"_new": object.__new__, "_cls": cls, **setters}
    exec(src, scope)   # noqa: S102 - generated from the dataclass's own field names
    return scope["make"]


assert not any(hasattr(cls, "__post_init__") for cls in c.COMMAND_TYPES)
_MAKERS = {cls.__name__: (cls, len(_FIELDS[cls]) + 1, _maker(cls)) for cls in c.COMMAND_TYPES}
# Defaults of the fields added last, in field order: Fire.shard, then every audited
# command's `actor` (DESIGN 14.6), Claim's priority range and tier weights (as encoded: a
# list), Fail's retry_after_ms, SubmitTask's limits and traceparent, SubmitWorkflow's
# traceparent, Heartbeat's progress. An item may lack any tail of them.
_ADDED_LATER: dict[type, list] = {
    c.Fire: [None, None], c.Cancel: [None], c.Replay: [None], c.Discard: [None],
    c.SetTenant: [None], c.PutSchedule: [None], c.DeleteSchedule: [None],
    c.PauseSchedule: [None], c.ResumeSchedule: [None],
    c.Claim: [0, 10, []], c.Fail: [0], c.SubmitTask: [[], None], c.SubmitWorkflow: [None],
    c.Heartbeat: [-1, ""]}


def _positional(item: object) -> c.Command:
    if not isinstance(item, list) or not item:
        raise DecodeError("a command is [type, value, ...]")
    tag = item[0]
    found = _MAKERS.get(tag) if isinstance(tag, str) else None
    if found is None:
        raise DecodeError(f"unknown command type {tag!r}")
    cls, size, make = found
    if len(item) != size:
        added = _ADDED_LATER.get(cls, [])
        if not size - len(added) <= len(item) < size:
            raise DecodeError(f"{tag} has {size - 1} fields")
        item = item + added[len(added) - (size - len(item)):]   # written before they existed
    for i, name in _SPECIAL_AT[cls]:
        value = item[i]
        if name == "retry":
            item[i] = _retry_positional(value)
        elif name == "template":
            item[i] = _template(value)
        elif name == "tier_weights":
            item[i] = _triples(value)
        elif name == "steps" or name == "templates":
            item[i] = _rows(value)
        elif isinstance(value, list):   # task_types, limits
            item[i] = tuple(value)
    cmd = make(item)
    if cls is c.SubmitTask:
        object.__setattr__(cmd, "timeout_ms", _shared_timeout(cmd.timeout_ms))
    return cmd


def _triples(value: object) -> object:
    """A claim's tier weights as decoded (lists) -> a tuple of tuples; anything else is
    left as it is, for apply-time validation to refuse."""
    if not isinstance(value, list):
        return value
    return tuple(tuple(v) if isinstance(v, list) else v for v in value)


def _rows(value: object) -> object:
    """A workflow's step or template rows as decoded (lists) -> tuples, their lists too (a
    retry record, deps), as the proposer built them; anything else is left for apply to
    refuse."""
    if not isinstance(value, list):
        return value
    return tuple(tuple(tuple(v) if isinstance(v, list) else v for v in row)
                 if isinstance(row, list) else row for row in value)


_retry_by_record: dict[tuple, c.RetryPolicy] = {}


def _retry_positional(value: object) -> c.RetryPolicy:
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


def pack(record: object) -> bytes:
    """The canonical encoding of a record (what the digest hashes)."""
    return msgpack.packb(record, use_bin_type=True)
