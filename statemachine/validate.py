"""Apply-time validation of commands (DESIGN section 3, rule 4: validate everything again).

Commands come out of the Raft log, so any field may hold anything msgpack can carry. Each
check raises `Rejected` with a result code before the handler has changed anything; the
machine turns it into a `Result`. Strings must be encodable as UTF-8 (the snapshot codec
needs that) and integers must be real ints (not bools, not floats).
"""
from __future__ import annotations

import re
from typing import Any

from . import commands as c
from .errors import INVALID_ARGUMENT, TOO_LARGE
from .limits import Limits

# A command as it came out of the log: its class's annotations say what its fields should
# hold, not what they hold until checked here, so the checks read them untyped (compiled
# code would raise TypeError on a typed read of a wrong value instead of refusing it).
Unchecked = Any

# A W3C `traceparent` (version 00, https://www.w3.org/TR/trace-context/): version, trace id,
# parent span id, flags, in lowercase hex; 55 characters, its own bound.
TRACEPARENT_CHARS = 55
TRACEPARENT = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}\Z")
BACKOFFS = ("exponential", "linear", "fixed")
OVERLAPS = ("allow", "skip", "buffer_one")
MISFIRES = ("run_all", "run_once", "skip")


class Rejected(Exception):
    """A command is refused; nothing has been changed."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


def _utf8(name: str, value: str) -> None:
    """Callers skip ASCII text (`str.isascii`, no copy): it always encodes, one byte per
    character. Only other text is encoded to find lone surrogates."""
    try:
        value.encode()
    except UnicodeEncodeError:
        raise Rejected(INVALID_ARGUMENT, f"{name} is not valid UTF-8 text", field=name) from None


def string(name: str, value: Unchecked, chars_max: int, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if type(value) is not str or not 0 < len(value) <= chars_max:
        raise Rejected(INVALID_ARGUMENT, f"{name} must be a string of 1..{chars_max} characters",
                       field=name)
    if not value.isascii():
        _utf8(name, value)


FIRE_SHARD_MAX = 0xFF    # a Fire's shard is two hex digits of its occurrence's task id


def integer(name: str, value: Unchecked, lo: int, hi: int, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if type(value) is not int or not lo <= value <= hi:
        raise Rejected(INVALID_ARGUMENT, f"{name} must be an integer in {lo}..{hi}", field=name)


def boolean(name: str, value: Unchecked) -> None:
    if type(value) is not bool:
        raise Rejected(INVALID_ARGUMENT, f"{name} must be true or false", field=name)


def choice(name: str, value: Unchecked, allowed: tuple[str, ...]) -> None:
    if type(value) is not str or value not in allowed:
        raise Rejected(INVALID_ARGUMENT, f"{name} must be one of {', '.join(allowed)}",
                       field=name)


def sized(name: str, value: Unchecked, bytes_max: int) -> None:
    """Text whose UTF-8 size is limited: too big is `too_large`, not text is invalid."""
    if type(value) is not str:
        raise Rejected(INVALID_ARGUMENT, f"{name} must be a string", field=name)
    if len(value) > bytes_max:
        raise Rejected(TOO_LARGE, f"{name} exceeds {bytes_max} bytes", field=name,
                       limit=bytes_max)
    if value.isascii():
        return      # as many bytes as characters: within the bound checked above
    _utf8(name, value)
    if len(value.encode()) > bytes_max:
        raise Rejected(TOO_LARGE, f"{name} exceeds {bytes_max} bytes", field=name,
                       limit=bytes_max)


def envelope(cmd: Unchecked, lim: Limits) -> None:
    string("request_id", cmd.request_id, lim.id_chars_max)
    integer("now_ms", cmd.now_ms, 0, lim.now_ms_max)


def retry_policy(p: Unchecked, lim: Limits) -> None:
    if not isinstance(p, c.RetryPolicy):
        raise Rejected(INVALID_ARGUMENT, "retry must be a retry policy", field="retry")
    choice("retry.backoff", p.backoff, BACKOFFS)
    integer("retry.base_ms", p.base_ms, 0, lim.backoff_ms_max)
    integer("retry.max_ms", p.max_ms, 0, lim.backoff_ms_max)
    if p.max_ms < p.base_ms:
        raise Rejected(INVALID_ARGUMENT, "retry.max_ms must be >= retry.base_ms",
                       field="retry.max_ms")
    integer("retry.multiplier_milli", p.multiplier_milli, lim.multiplier_milli_min,
            lim.multiplier_milli_max)
    integer("retry.jitter_permille", p.jitter_permille, 0, lim.jitter_permille_max)


def task_fields(t: Unchecked, lim: Limits) -> None:
    """The fields a SubmitTask and a TaskTemplate share."""
    string("task_type", t.task_type, lim.task_type_chars_max)
    sized("payload", t.payload_json, lim.payload_bytes_max)
    integer("priority", t.priority, 0, lim.priority_max)
    integer("timeout_ms", t.timeout_ms, lim.timeout_ms_min, lim.timeout_ms_max)
    integer("max_retries", t.max_retries, 0, lim.max_retries_max)
    retry_policy(t.retry, lim)


def submit(cmd: Unchecked, lim: Limits, now_ms: int) -> None:
    string("task_id", cmd.task_id, lim.id_chars_max)
    string("tenant", cmd.tenant, lim.tenant_chars_max)
    task_fields(cmd, lim)
    integer("run_at_ms", cmd.run_at_ms, 0, now_ms + lim.run_at_ahead_ms_max, optional=True)
    string("idempotency_key", cmd.idempotency_key, lim.idempotency_key_chars_max,
           optional=True)
    limit_names(cmd.limits, lim)
    traceparent(cmd.traceparent)


def traceparent(value: Unchecked) -> None:
    """None, or a W3C traceparent of version 00 with non-zero ids."""
    if value is None:
        return
    if type(value) is not str or len(value) != TRACEPARENT_CHARS \
            or TRACEPARENT.match(value) is None:
        raise Rejected(INVALID_ARGUMENT, "traceparent must be a W3C traceparent "
                       "(00-<32 hex>-<16 hex>-<2 hex>)", field="traceparent")


def limit_names(names: Unchecked, lim: Limits) -> None:
    """A task's limits: distinct names, at most `limits_per_task_max`."""
    if type(names) is not tuple or len(names) > lim.limits_per_task_max:
        raise Rejected(INVALID_ARGUMENT, f"limits must be a list of at most "
                       f"{lim.limits_per_task_max} limit names", field="limits")
    for name in names:
        string("limits[]", name, lim.limit_name_chars_max)
    if len(dict.fromkeys(names)) != len(names):
        raise Rejected(INVALID_ARGUMENT, "limits must not name a limit twice", field="limits")


def scope(cmd: Unchecked, lim: Limits) -> None:
    string("tenant", cmd.tenant, lim.tenant_chars_max, optional=True)


def claim(cmd: Unchecked, lim: Limits) -> None:
    string("worker_id", cmd.worker_id, lim.id_chars_max)
    types = cmd.task_types
    if not isinstance(types, (tuple, list)) or not 0 < len(types) <= lim.claim_task_types_max:
        raise Rejected(INVALID_ARGUMENT,
                       f"task_types must list 1..{lim.claim_task_types_max} task types",
                       field="task_types")
    for t in types:
        string("task_types[]", t, lim.task_type_chars_max)
    integer("max_tasks", cmd.max_tasks, 1, lim.claim_tasks_max)
    integer("lease_ms", cmd.lease_ms, lim.lease_ms_min, lim.lease_ms_max)
    integer("prefetch_ms", cmd.prefetch_ms, 0, lim.prefetch_ms_max)
    integer("priority_min", cmd.priority_min, 0, lim.priority_max)
    integer("priority_max", cmd.priority_max, cmd.priority_min, lim.priority_max)
    tier_weights(cmd, lim)
    scope(cmd, lim)


def tier_weights(cmd: Unchecked, lim: Limits) -> None:
    """A claim's (lo, hi, weight) triples: disjoint ranges of 0..priority_max, most urgent
    first, each weight in 1..tier_weight_max; not together with a priority range."""
    value = cmd.tier_weights
    if type(value) is not tuple:
        raise Rejected(INVALID_ARGUMENT, "tier_weights must be a list of (lo, hi, weight)",
                       field="tier_weights")
    if not value:
        return
    if cmd.priority_min != 0 or cmd.priority_max != lim.priority_max:
        raise Rejected(INVALID_ARGUMENT, "tier_weights cannot be given with priority_min / "
                       "priority_max", field="tier_weights")
    after = 0          # the least priority the next range may start at
    for item in value:
        if type(item) is not tuple or len(item) != 3 or not all(
                type(v) is int for v in item) or not after <= item[0] <= item[1] \
                <= lim.priority_max or not 1 <= item[2] <= lim.tier_weight_max:
            raise Rejected(INVALID_ARGUMENT, f"tier_weights must list disjoint priority "
                           f"ranges in order, each with a weight in 1..{lim.tier_weight_max}",
                           field="tier_weights")
        after = item[1] + 1


def task_ref(cmd: Unchecked, lim: Limits) -> None:
    string("task_id", cmd.task_id, lim.id_chars_max)
    if cmd.tenant is not None:
        string("tenant", cmd.tenant, lim.tenant_chars_max)


def fenced(cmd: Unchecked, lim: Limits) -> None:
    """`task_ref` and the token, inlined: every completion of every task passes here."""
    string("task_id", cmd.task_id, lim.id_chars_max)
    if cmd.tenant is not None:
        string("tenant", cmd.tenant, lim.tenant_chars_max)
    integer("fencing_token", cmd.fencing_token, 0, lim.fencing_token_max)


def heartbeat(cmd: Unchecked, lim: Limits) -> None:
    fenced(cmd, lim)
    integer("lease_ms", cmd.lease_ms, lim.lease_ms_min, lim.lease_ms_max)
    integer("progress", cmd.progress_permille, -1, lim.progress_permille_max)
    message = cmd.progress_message
    if message != "":   # no message is an empty one
        string("progress.message", message, lim.progress_message_chars_max)
    if cmd.progress_permille < 0 and message:
        raise Rejected(INVALID_ARGUMENT, "a progress message needs a fraction",
                       field="progress.fraction")


def complete(cmd: Unchecked, lim: Limits) -> None:
    fenced(cmd, lim)
    sized("result", cmd.result_json, lim.result_bytes_max)


def fail(cmd: Unchecked, lim: Limits) -> None:
    fenced(cmd, lim)
    sized("error", cmd.error, lim.error_bytes_max)
    boolean("retryable", cmd.retryable)
    integer("retry_after_ms", cmd.retry_after_ms, 0, lim.backoff_ms_max)


def set_tenant(cmd: Unchecked, lim: Limits) -> None:
    string("tenant", cmd.tenant, lim.tenant_chars_max)
    integer("max_running", cmd.max_running, 0, lim.tenant_running_max, optional=True)
    integer("weight", cmd.weight, 1, lim.tenant_weight_max, optional=True)


def schedule_ref(cmd: Unchecked, lim: Limits) -> None:
    string("tenant", cmd.tenant, lim.tenant_chars_max)
    string("schedule_id", cmd.schedule_id, lim.id_chars_max)


def put_schedule(cmd: Unchecked, lim: Limits) -> None:
    schedule_ref(cmd, lim)
    string("cron", cmd.cron, lim.cron_chars_max)
    string("timezone", cmd.timezone, lim.timezone_chars_max)
    if not isinstance(cmd.template, c.TaskTemplate):
        raise Rejected(INVALID_ARGUMENT, "template must be a task template", field="template")
    task_fields(cmd.template, lim)
    choice("overlap", cmd.overlap, OVERLAPS)
    choice("misfire", cmd.misfire, MISFIRES)
    integer("catchup_window_ms", cmd.catchup_window_ms, 0, lim.catchup_window_ms_max)
    boolean("paused", cmd.paused)
    integer("start_at_ms", cmd.start_at_ms, 0, lim.now_ms_max, optional=True)
    integer("end_at_ms", cmd.end_at_ms, 0, lim.now_ms_max, optional=True)
    if cmd.start_at_ms is not None and cmd.end_at_ms is not None \
            and cmd.end_at_ms < cmd.start_at_ms:
        raise Rejected(INVALID_ARGUMENT, "end_at must not be before start_at", field="end_at_ms")
    integer("jitter_ms", cmd.jitter_ms, 0, lim.jitter_ms_max)
    integer("next_fire_ms", cmd.next_fire_ms, 0, lim.now_ms_max, optional=True)


def resume(cmd: Unchecked, lim: Limits) -> None:
    schedule_ref(cmd, lim)
    integer("next_fire_ms", cmd.next_fire_ms, 0, lim.now_ms_max, optional=True)


def fire(cmd: Unchecked, lim: Limits) -> None:
    schedule_ref(cmd, lim)
    integer("fire_ms", cmd.fire_ms, 0, lim.now_ms_max)
    integer("next_fire_ms", cmd.next_fire_ms, 0, lim.now_ms_max, optional=True)
    boolean("manual", cmd.manual)
    integer("shard", cmd.shard, 0, FIRE_SHARD_MAX, optional=True)
    if not cmd.manual and cmd.next_fire_ms is not None and cmd.next_fire_ms <= cmd.fire_ms:
        raise Rejected(INVALID_ARGUMENT, "next_fire_ms must be after fire_ms",
                       field="next_fire_ms")


def put_limit(cmd: Unchecked, lim: Limits) -> None:
    string("name", cmd.name, lim.limit_name_chars_max)
    integer("rate", cmd.rate, 0, lim.limit_rate_max)
    integer("per_ms", cmd.per_ms, 1, lim.limit_per_ms_max)
    integer("concurrency", cmd.concurrency, 0, lim.limit_concurrency_max)
    string("partition_by", cmd.partition_by, lim.limit_field_chars_max, optional=True)
    if cmd.rate == 0 and cmd.concurrency == 0:
        raise Rejected(INVALID_ARGUMENT, "a limit needs a rate or a concurrency (or both)",
                       field="rate")


def limit_ref(cmd: Unchecked, lim: Limits) -> None:
    string("name", cmd.name, lim.limit_name_chars_max)


def pause_limit(cmd: Unchecked, lim: Limits) -> None:
    fenced(cmd, lim)
    string("limit", cmd.limit, lim.limit_name_chars_max)
    integer("after_ms", cmd.after_ms, 1, lim.limit_pause_ms_max)
