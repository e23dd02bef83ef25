"""The leader's fire decisions: which `Fire` commands to propose for due schedules.

A cron `Fire` applies only at the schedule's current `next_fire_ms` and moves it to the
command's `next_fire_ms`, so the commands for one schedule form a chain. The state machine
decides each occurrence's outcome from its own clock: older than `catchup_window_ms` ->
"missed"; misfire `skip` and later than its grace -> "skipped"; otherwise the overlap policy
("ran" or "skipped"). Here the leader decides which occurrences to propose at all:

- occurrences older than the catch-up window are jumped over with one Fire (recorded as one
  "missed"), so a long outage costs one command, not one per missed occurrence;
- `run_all` proposes every occurrence inside the window, each late;
- `run_once` proposes the first one inside the window and jumps past the rest: one late run;
- `skip` jumps from the first one inside the window to the latest due one (the first is
  recorded "skipped" if it is late), which then runs if it is on time.
"""
from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict

from tsched.statemachine import commands as c
from tsched.statemachine.machine import StateMachine
from tsched.statemachine.model import Schedule

from tsched.node.scheduling import cron
from tsched.node.ids import new_id

log = logging.getLogger("tsched.node.firing")

# The caller holds the replica lock (Raft's apply waits) and each fire costs a cron step of
# roughly 0.1-0.5 ms: 100 keeps a call to tens of ms; a long catch-up continues next round.
FIRES_PER_CALL_MAX = 100
SPEC_CACHE_MAX = 4_096
# `skip` looks for the latest due occurrence this many steps ahead, then jumps past now.
LATEST_SEARCH_STEPS_MAX = 1_000


class SpecCache:
    """Parsed cron specs by (expr, zone, hash id), least recently used evicted first."""

    def __init__(self, size: int = SPEC_CACHE_MAX) -> None:
        self.size = size
        self._specs: OrderedDict[tuple[str, str, str], cron.CronSpec] = OrderedDict()

    def get(self, expr: str, zone: str, hash_id: str) -> cron.CronSpec:
        key = (expr, zone, hash_id)
        spec = self._specs.get(key)
        if spec is not None:
            self._specs.move_to_end(key)
            return spec
        spec = cron.parse(expr, zone, hash_id)
        self._specs[key] = spec
        if len(self._specs) > self.size:
            self._specs.popitem(last=False)
        return spec

    def __len__(self) -> int:
        return len(self._specs)


_SPECS = SpecCache()


def spec_for(schedule: Schedule, cache: SpecCache | None = None) -> cron.CronSpec:
    """A schedule's spec; `H` fields hash by its schedule id."""
    return (cache or _SPECS).get(schedule.cron, schedule.timezone, schedule.schedule_id)


def next_in_window(spec: cron.CronSpec, after_ms: int, start_at_ms: int | None,
                   end_at_ms: int | None) -> int | None:
    """The first fire strictly after `after_ms` within [start_at, end_at]; None: no more."""
    if start_at_ms is not None and after_ms < start_at_ms - 1:
        after_ms = start_at_ms - 1
    nxt = cron.next_fire_ms(spec, after_ms)
    if nxt is None or (end_at_ms is not None and nxt > end_at_ms):
        return None
    return nxt


def due_fire_commands(sm: StateMachine, now_ms: int, max_fires: int = FIRES_PER_CALL_MAX,
                      cache: SpecCache | None = None, lead_ms: int = 0,
                      shard: int | None = None) -> list[c.Fire]:
    """Fire commands for every schedule due by `now_ms + lead_ms`, at most `max_fires`.

    Call under the replica lock. A cut-off chain is continued by the next call (the state
    then shows the schedule still due). `lead_ms` > 0 proposes fires that early: their
    tasks exist (with `run_at` = the fire time) before the fire time, so a waiting worker
    gets one at its `run_at` after one Raft round (the claim) instead of two. A shard's
    fires carry its number (`shard`), which their occurrences' task ids then name."""
    out: list[c.Fire] = []
    horizon_ms = now_ms + max(0, lead_ms)
    for tenant, schedule_id, fire_ms in sm.due_fires(horizon_ms):
        if len(out) >= max_fires:
            break
        sched = sm.get_schedule(tenant, schedule_id)
        if sched is None or sched.paused or sched.next_fire_ms != fire_ms:
            continue
        out.extend(_schedule_fires(sched, fire_ms, now_ms, horizon_ms, max_fires - len(out),
                                   cache))
    return out if shard is None else [dataclasses.replace(f, shard=shard) for f in out]


def _schedule_fires(sched: Schedule, due_ms: int, now_ms: int, horizon_ms: int, budget: int,
                    cache: SpecCache | None) -> list[c.Fire]:
    """The chain of Fires from `due_ms`, the schedule's `next_fire_ms` (due)."""
    try:
        spec = spec_for(sched, cache)
    except cron.CronError as e:
        # Accepted once, refused now (e.g. this host's zone data lacks the zone): run this
        # occurrence and stop the schedule rather than spin on it.
        log.warning("event=schedule_unparsable tenant=%s schedule=%s error=%s",
                    sched.tenant, sched.schedule_id, e)
        return [_fire(sched, due_ms, None, now_ms)]
    out: list[c.Fire] = []
    fire_ms: int | None = due_ms
    while fire_ms is not None and fire_ms <= horizon_ms and len(out) < budget:
        nxt = _next_to_propose(spec, sched, fire_ms, now_ms)
        out.append(_fire(sched, fire_ms, nxt, now_ms))
        fire_ms = nxt
    return out


def _next_to_propose(spec: cron.CronSpec, sched: Schedule, fire_ms: int, now_ms: int) -> int | None:
    """What the chain moves to after proposing `fire_ms` (see the module docstring)."""
    def after(ms: int) -> int | None:
        return next_in_window(spec, ms, sched.start_at_ms, sched.end_at_ms)

    oldest_young_ms = now_ms - sched.catchup_window_ms
    if fire_ms < oldest_young_ms:                    # missed: jump to the first young one
        return after(max(fire_ms, oldest_young_ms - 1))
    nxt = after(fire_ms)
    if sched.misfire == "run_all" or nxt is None or nxt > now_ms:
        return nxt
    if sched.misfire == "run_once":                  # this one runs; the rest are dropped
        return after(now_ms)
    return _latest_due(spec, sched, nxt, now_ms)     # skip: on to the latest due one


def _latest_due(spec: cron.CronSpec, sched: Schedule, due_ms: int, now_ms: int) -> int | None:
    """The last occurrence at or before now, starting from a due one (bounded search)."""
    for _ in range(LATEST_SEARCH_STEPS_MAX):
        nxt = next_in_window(spec, due_ms, sched.start_at_ms, sched.end_at_ms)
        if nxt is None or nxt > now_ms:
            return due_ms
        due_ms = nxt
    return next_in_window(spec, now_ms, sched.start_at_ms, sched.end_at_ms)


def _fire(sched: Schedule, fire_ms: int, next_fire_ms: int | None, now_ms: int) -> c.Fire:
    # A fresh request id: a fire proposed twice is already a no-op in the state machine
    # (fire_ms no longer equals next_fire_ms), while a per-occurrence id could be answered
    # from the request table after a PUT made that occurrence due again, wedging the chain.
    return c.Fire(request_id=new_id(), now_ms=now_ms, tenant=sched.tenant,
                  schedule_id=sched.schedule_id, fire_ms=fire_ms, next_fire_ms=next_fire_ms)
