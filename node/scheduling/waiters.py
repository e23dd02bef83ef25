"""A long-poll claim waiting at the leader (claim_hub.py): the Waiter, the completions it
carries, and the table that holds the waiters and bounds each worker's and tenant's share
of the waiting room."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable

from tsched.statemachine import commands as c

from tsched.node.errors import ApiError
from tsched.node.ids import new_id as _new_id
from tsched.node.scheduling.claim_request import ClaimRequest, JsonObject

WAITERS_MAX = 10_000
# One worker id keeps a couple of long polls open (the Worker runtime: two); one tenant's
# token may not take the waiting room from the others.
WAITERS_PER_WORKER_MAX = 16
WAITERS_PER_TENANT_MAX = 2_500


class _Ready(list[JsonObject]):
    """The answer of a watch whose kind of claim would find work (an empty task list)."""


READY = _Ready()


class NotLeader(Exception):
    """This node stopped leading while a claim waited here."""


@dataclass(eq=False)
class Completions:
    """The completions a claim carries (DESIGN.md section 7): proposed at once, in the same
    batch as the waiter's first Claim and before it when the waiter is dispatched at once,
    else alone (the waiter is then dispatched as any other: a Claim for every carrier,
    claimable work or not, made a storm of small Claims under a trickle of due tasks). So a
    worker finishing a batch and asking for the next costs one round trip, and mostly one
    Raft entry."""

    cmds: list[c.Command]                      # Complete / Fail, in request order
    results: list[JsonObject] | None = None    # one rendered task or error object per command
    minimal: bool = False            # `Prefer: return=minimal`: each answered by id and state


@dataclass(eq=False)
class Waiter:
    claim: ClaimRequest
    is_gone: Callable[[], bool]
    future: asyncio.Future[tuple[list[JsonObject], int | None]]
    busy: bool = False      # a Claim for it is being committed
    expired: bool = False   # its wait ended while busy: answer whatever the Claim brings
    abandoned: bool = False  # leadership went while its Claim was in flight
    blocked: bool = False   # its last Claim came back empty: wait for new work first
    id: int = 0
    completions: Completions | None = None   # not yet proposed while `.results` is None
    carried: int = 0        # completion commands proposed ahead of its Claim in flight
    rid_base: str | None = None   # from the client's Idempotency-Key: retries replay Claims
    claims_made: int = 0

    @property
    def tenant(self) -> str | None:
        return self.claim.tenant

    @property
    def watch(self) -> bool:
        """Answered READY when work is claimable; proposes no Claim."""
        return self.claim.watch

    @property
    def minimal(self) -> bool:
        """`Prefer: return=minimal`: its tasks as a worker needs them."""
        return self.claim.minimal

    def peek_request_id(self) -> str:
        return f"{self.rid_base}.{self.claims_made}"

    def next_request_id(self) -> str:
        if self.rid_base is None:
            return _new_id()
        rid = self.peek_request_id()
        self.claims_made += 1
        return rid

    def still_its(self, tasks: list[JsonObject]) -> list[JsonObject]:
        """A replayed Claim's tasks that are still leased to this worker id."""
        me = self.claim.worker_id
        return [t for t in tasks if t.get("state") == "running" and t.get("worker_id") == me]


class WaiterTable(dict[int, Waiter]):
    """Waiters by id, counting them per worker id and per tenant scope as they come and go
    (only item assignment and `discard` are used on it)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_worker: dict[str, int] = {}
        self.by_tenant: dict[str, int] = {}

    def check_share(self, worker_id: str, tenant: str | None) -> None:
        if self.by_worker.get(worker_id, 0) >= WAITERS_PER_WORKER_MAX:
            raise ApiError("tenant_limit", f"worker {worker_id!r} already has "
                           f"{WAITERS_PER_WORKER_MAX} waiting claims",
                           {"limit": WAITERS_PER_WORKER_MAX, "worker_id": worker_id})
        if tenant is not None and self.by_tenant.get(tenant, 0) >= WAITERS_PER_TENANT_MAX:
            raise ApiError("tenant_limit", f"tenant {tenant!r} already has "
                           f"{WAITERS_PER_TENANT_MAX} waiting claims",
                           {"limit": WAITERS_PER_TENANT_MAX, "tenant": tenant})

    def __setitem__(self, key: int, w: Waiter) -> None:
        if key in self:
            raise KeyError(f"waiter {key} is already registered")
        super().__setitem__(key, w)
        _count(self.by_worker, w.claim.worker_id, 1)
        if w.tenant is not None:
            _count(self.by_tenant, w.tenant, 1)

    def discard(self, key: int) -> None:
        if key not in self:
            return
        w = super().pop(key)
        _count(self.by_worker, w.claim.worker_id, -1)
        if w.tenant is not None:
            _count(self.by_tenant, w.tenant, -1)


def _count(counts: dict[str, int], key: str, delta: int) -> None:
    n = counts.get(key, 0) + delta
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)
