"""Reserved worker capacity (DESIGN 5.1): `Worker(reserve={"low": 0.1})`, `tsworker
--reserve low=10%`.

A worker with a reserve is split into lanes, each a Worker of its own with its slots, its
claim window and its handler threads: one lane per named tier, of `ceil(share *
concurrency)` slots (at least one), claims only that tier's range (within the worker's
`priorities`, if given); the lane of the slots left (at least one) claims the worker's
whole range, most urgent first. So a flood of urgent work cannot take every slot: a
reserved slot serves its tier while the flood waits. A worker without a reserve is one
lane, itself; nothing here runs then.
"""
from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from tsched.statemachine.tiers import TierError, by_name

if TYPE_CHECKING:
    from ._worker import Worker

Reserve = dict[str, Fraction]     # tier name -> share of the worker's slots, in (0, 1)


@dataclass(frozen=True)
class Lane:
    name: str | None                       # the reserved tier; None: the unreserved slots
    slots: int
    priorities: tuple[int, int] | None     # what its claims take; None: every priority


def check_reserve(value: Any) -> Reserve:
    """`{"low": 0.1}`, `"low=10%,high=0.2"` or a list of such strings (tsworker's repeated
    --reserve) -> {tier: share}. Tier names are the default table's (DESIGN 5.1); a share is
    a fraction in (0, 1), as a number, `"0.1"` or `"10%"`. ValueError naming `reserve`."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, str):
        pairs = _pairs([value])
    elif isinstance(value, Iterable):
        pairs = _pairs(value)
    else:
        raise ValueError(f"reserve must be {{tier: share}} or 'tier=share,...', got {value!r}")
    out: Reserve = {}
    for name, share in pairs:
        try:
            tier = by_name(str(name).strip())
        except TierError as e:
            raise ValueError(f"reserve: {e}") from None
        if tier.name in out:
            raise ValueError(f"reserve: tier {tier.name!r} is named twice")
        out[tier.name] = _share(tier.name, share)
    return out


def _pairs(items: Iterable[Any]) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"reserve: expected 'tier=share', got {item!r}")
        for part in item.split(","):
            name, eq, share = part.partition("=")
            if not eq or not name.strip() or not share.strip():
                raise ValueError(f"reserve: expected 'tier=share' (e.g. low=10%), got {part!r}")
            pairs.append((name.strip(), share.strip()))
    return pairs


def _share(name: str, value: Any) -> Fraction:
    """A share in (0, 1): 0.1, "0.1" or "10%" (exact: 0.7 of 10 slots is 7, not 8)."""
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str, Fraction)):
            raise ValueError
        text = str(value).strip()
        share = Fraction(text[:-1]) / 100 if text.endswith("%") else Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"reserve: the share of {name!r} must be a fraction like 0.1 or "
                         f"10%, got {value!r}") from None
    if not 0 < share < 1:
        raise ValueError(f"reserve: the share of {name!r} must be above 0 and below 1 "
                         f"(100%), got {value!r}")
    return share


def split_slots(concurrency: int, reserve: Reserve,
                priorities: tuple[int, int] | None = None) -> list[Lane]:
    """The lanes of a worker: the unreserved one first, then one per reserved tier.
    ValueError naming `reserve` when a tier is outside `priorities` or no slot is left."""
    lanes = []
    for name, share in reserve.items():
        tier = by_name(name)
        lo, hi = tier.lo, tier.hi
        if priorities is not None:
            lo, hi = max(lo, priorities[0]), min(hi, priorities[1])
            if lo > hi:
                raise ValueError(f"reserve: tier {name!r} ({tier.lo}-{tier.hi}) is outside "
                                 f"the worker's priorities {priorities[0]}-{priorities[1]}")
        lanes.append(Lane(name, max(1, math.ceil(share * concurrency)), (lo, hi)))
    reserved = sum(lane.slots for lane in lanes)
    if reserved >= concurrency:
        raise ValueError(f"reserve: {reserved} of the worker's {concurrency} slots would be "
                         f"reserved; at least one must be left unreserved (raise concurrency "
                         f"or lower the shares)")
    return [Lane(None, concurrency - reserved, priorities), *lanes]


def describe(lanes: list[Lane]) -> str:
    """`"low 1 slot, the rest 9"`, for log lines."""
    reserved = [f"{lane.name} {lane.slots} slot{'s' if lane.slots > 1 else ''}"
                for lane in lanes if lane.name is not None]
    return ", ".join(reserved + [f"the rest {lanes[0].slots}"])


def lane_workers(worker: Worker, lanes: list[Lane]) -> list[Worker]:
    """One Worker per lane, with the worker's options and its share of the claim window;
    a reserved lane's worker id is the worker's with `/tier`."""
    subs = []
    for lane in lanes:
        share = Fraction(lane.slots, worker.concurrency)
        sub = type(worker)(
            worker.urls, worker.handlers, concurrency=lane.slots, lease_s=worker.lease_s,
            prefetch_ms=worker.prefetch_ms, token=worker.token, grace_s=worker.grace_s,
            worker_id=worker.worker_id + (f"/{lane.name}" if lane.name else ""),
            wait_s=worker.wait_s, timeout_s=worker.timeout_s, ca_file=worker.ca_file,
            claim_ahead=math.ceil(worker.claim_ahead * share),
            held_max=math.ceil(worker.held_max * share),
            carry_completions=worker.carry_completions, priorities=lane.priorities,
            session_timeout_s=worker.session_timeout_s)
        sub.retry_rules = worker.retry_rules
        sub.handles_signals = False      # the worker's own handlers stop every lane
        subs.append(sub)
    return subs


def _stop_all(subs: list[Worker]) -> None:
    for sub in subs:
        sub.stop()


async def run_lanes(worker: Worker, subs: list[Worker]) -> None:
    """Run the lanes until the worker is asked to stop (or a lane ends: then the others
    stop too); a second stop, hurrying, is passed on. A lane's error is raised once every
    lane has stopped."""
    runs = [asyncio.create_task(sub.run_async()) for sub in subs]
    stopping = asyncio.create_task(worker._stopping.wait())
    hurry = asyncio.create_task(worker._hurry.wait())
    hurry.add_done_callback(lambda t: None if t.cancelled() else _stop_all(subs))
    try:
        await asyncio.wait([*runs, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        _stop_all(subs)
        stopping.cancel()
        try:
            ends = await asyncio.gather(*runs, return_exceptions=True)
        finally:
            hurry.cancel()
    for end in ends:
        if isinstance(end, BaseException):
            raise end
