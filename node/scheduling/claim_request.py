"""What a worker's request asks, parsed and bounded by the API (api/claim_parsing.py): a
claim (`ClaimRequest`), the completions and heartbeats it reports (`CompletionItem`,
`HeartbeatItem`, `Reports`), and what a claim's decision answers (`ClaimOutcome`).
Frozen: the API builds each once and nothing below it changes them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from tsched.node.errors import ApiError, JsonObject
from tsched.node.scheduling.worker_slots import SlotReport

ALL_PRIORITIES = (0, 10)

# What the proposer answers a command with (raft/commit.py `propose`, one per command): a
# rendered task or result (a heartbeat's), or the command's error; a Claim's, the tasks
# it claimed.
ItemAnswer = JsonObject | ApiError
Answer = JsonObject | list[JsonObject] | ApiError


class CompletionItem(NamedTuple):
    """One complete (`result_json`) or fail (`error`, `retryable`, `retry_after_ms`).
    A named tuple, immutable like the requests: one is made per reported task, and it
    is made in a third of a frozen dataclass's time."""

    task_id: str
    fencing_token: int
    failing: bool = False
    result_json: str = ""
    error: str = ""
    retryable: bool = True
    retry_after_ms: int = 0


class HeartbeatItem(NamedTuple):
    """One heartbeat (a named tuple: one per task, as CompletionItem)."""

    task_id: str
    fencing_token: int
    lease_ms: int
    progress_permille: int = -1   # the handler's progress (DESIGN 9): -1 carries none
    progress_message: str = ""


@dataclass(frozen=True, slots=True)
class Reports:
    """A report of heartbeats, or of completions and failures: one item (its endpoint's)
    or a batch (`/v1/heartbeats`, `/v1/completions`: one answer per item)."""

    heartbeats: tuple[HeartbeatItem, ...] = ()
    completions: tuple[CompletionItem, ...] = ()
    request_ids: tuple[str, ...] = ()   # one per item (a batch's `#i` under the request's)
    tenant: str | None = None   # the caller's token's tenant scope
    batch: bool = False
    minimal: bool = False       # `Prefer: return=minimal` (completions and failures only)


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """A claim (DESIGN.md section 7): its body's fields, its headers' part, its caller."""

    worker_id: str
    task_types: tuple[str, ...]            # sorted, each once
    max_tasks: int = 1
    wait_s: float = 0.0
    lease_ms: int = 30_000
    prefetch_ms: int = 0
    priorities: tuple[int, int] = ALL_PRIORITIES    # inclusive effective-priority range
    tier_weights: tuple[tuple[int, int, int], ...] = ()   # (lo, hi, weight), most urgent first
    completions: tuple[CompletionItem, ...] | None = None   # carried; None: no such key
    completion_ids: tuple[str, ...] = ()   # their request ids (`#c{i}` under the request's)
    tenant: str | None = None    # the caller's token's tenant scope
    watch: bool = False          # X-Tsched-Claim-Watch: leases nothing, says when work is there
    head: bool = False           # X-Tsched-Claim-Head: the most urgent priority, no wait
    forwarded: bool = False      # sent by a node that took this one for the leader
    rid_base: str | None = None  # from the Idempotency-Key: the Claims' request ids' base
    minimal: bool = False        # `Prefer: return=minimal`
    slots: SlotReport | None = None   # the worker's busy and total slots, if it said

    def kind(self) -> tuple[tuple[str, ...], str | None, int, tuple[int, int],
                            tuple[tuple[int, int, int], ...]]:
        """What a claim's finding work depends on (task types, scope, prefetch, range,
        weights): waiters of one kind drain the same queue."""
        return (self.task_types, self.tenant, self.prefetch_ms, self.priorities,
                self.tier_weights)


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """A claim's answer: the tasks it took (`ready`: a watch's work is there), a head
    read's head, the carried completions' results, and the applied seq to answer with."""

    tasks: list[JsonObject]
    seq: int
    ready: bool = False
    head: int | None = None
    completions: list[JsonObject] | None = None
