"""Pure arithmetic of the rules: backoff, deterministic jitter, derived ids, ordering keys.

Everything that looks random is a hash of replicated values (hashlib is pure), so every
replica computes the same number.
"""
from __future__ import annotations

import hashlib

from .commands import RetryPolicy


def hash_int(*parts: object) -> int:
    """A 64-bit integer derived from `parts` (stable across processes and hosts)."""
    text = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def backoff_ms(policy: RetryPolicy, failures: int, task_id: str, attempt: int) -> int:
    """Delay before retry number `failures` (1 = after the first failed attempt).

    Capped at `max_ms`; jitter then subtracts up to `jitter_permille`/1000 of the delay, so
    the cap stays a true upper bound. The jitter seed is (task_id, attempt).
    """
    base = policy.base_ms
    if policy.backoff == "fixed":
        delay = base
    elif policy.backoff == "linear":
        delay = base * failures
    else:
        delay = base
        for _ in range(failures - 1):
            if delay >= policy.max_ms:
                break
            delay = delay * policy.multiplier_milli // 1000
    delay = min(delay, policy.max_ms)
    spread = delay * policy.jitter_permille // 1000
    if spread > 0:
        delay -= hash_int("backoff", task_id, attempt) % (spread + 1)
    return delay


def fire_jitter_ms(schedule_id: str, fire_ms: int, jitter_ms: int) -> int:
    if jitter_ms <= 0:
        return 0
    return hash_int("fire", schedule_id, fire_ms) % (jitter_ms + 1)


def occurrence_task_id(tenant: str, schedule_id: str, fire_ms: int, manual: bool,
                       shard: int | None = None) -> str:
    """One cron occurrence, one task id: a fire proposed twice creates one task.

    `s-` and 32 hex digits; a shard's fire (`Fire.shard`) puts its number after the `s`
    in two hex digits (`s03-...`), as a task id of a shard begins with it, so a router
    sends requests on the task to that shard rather than to all of them."""
    text = "\x1f".join((tenant, schedule_id, str(fire_ms), "m" if manual else "c")).encode()
    head = "s-" if shard is None else f"s{shard:02x}-"
    return head + hashlib.sha256(text).hexdigest()[:32]


def static_key(priority: int, run_at_ms: int, aging_interval_ms: int) -> int:
    """Aging without rescans: ordering by this key equals ordering by effective priority
    max(0, priority - floor(wait / aging)), then run_at, at any clock."""
    return max(0, priority * aging_interval_ms + run_at_ms)


def effective_priority(key: int, now_ms: int, aging_interval_ms: int) -> int:
    """max(0, priority - floor((now - run_at) / aging)) == max(0, ceil((key - now) / aging))."""
    return max(0, -((now_ms - key) // aging_interval_ms))
