"""`Proposer`: commands from the asyncio loop into Raft, answers back (DESIGN.md 4 and 6).

Concurrent proposals made within one loop iteration are packed into one Raft entry. Waiters
are keyed by `request_id` and answered from the apply listener, so an entry that commits
after an ambiguous outcome (a leader change, a timed-out wait) still answers. A `propose()`
call waits on one future for all its commands (a submit batch is up to 1,000), not on one
per command. A failure
reported by pysyncobj, a change of leader, or no answer within `repropose_after_s`,
re-proposes the same commands (same `request_id`s: the state machine's request table applies them at most once)
until the deadline.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Callable, Protocol

from tsched.statemachine.commands import Command
from tsched.statemachine.errors import Result
from tsched.statemachine.limits import API_LIMITS

from tsched.node.raft.options import RaftOptions

log = logging.getLogger(__name__)

# What `propose` answers for a command: its result as `render` made it (the API's JSON
# documents; any value the renderer chooses).
Rendered = Any
Render = Callable[[Command, Result], Rendered]


class ProposerReplica(Protocol):
    """What a Proposer needs of the replica (`replica.Replica`)."""

    @property
    def options(self) -> RaftOptions: ...

    @property
    def applied_seq(self) -> int: ...

    def leader_id(self) -> str | None: ...

    def encode_batch(self, cmds: list) -> bytes: ...

    def propose_blob(self, blob: bytes, on_error: Callable[[str], object] | None = None,
                     cmds: list | None = None) -> None: ...

    def add_apply_listener(self, fn: Callable[[int, list, list], None]) -> None: ...


class ProposalError(Exception):
    """`code` is "no_leader" (none reachable for the whole wait) or "timeout" (ambiguous)."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code


class _Call:
    """One `propose()` call: its failure signal (a future per attempt), shared by the
    batches it rode in."""

    __slots__ = ("failed", "reason")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.failed: asyncio.Future = loop.create_future()
        self.reason: str | None = None

    def rearm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.failed.done():
            self.failed = loop.create_future()

    def fail(self, reason: str) -> None:
        self.reason = reason
        if not self.failed.done():
            self.failed.set_result(reason)


_UNANSWERED = object()


class _Answers:
    """The answers of one `propose()` call, by command position; `done` resolves once
    every command has its answer. Touched on the loop only."""

    __slots__ = ("values", "missing", "seq", "done", "minimal")

    def __init__(self, n: int, loop: asyncio.AbstractEventLoop,
                 minimal: bool | Sequence[bool] = False) -> None:
        self.values: list = [_UNANSWERED] * n
        self.missing = n
        self.seq = 0
        self.done: asyncio.Future = loop.create_future()
        self.minimal = minimal   # the caller asked for minimal answers: all, or per command

    def wants_minimal(self, i: int) -> bool:
        m = self.minimal
        return m if isinstance(m, bool) else bool(m[i])

    def answer(self, i: int, value: Rendered, seq: int) -> None:
        if self.values[i] is not _UNANSWERED:
            return
        self.values[i] = value
        self.seq = max(self.seq, seq)
        self.missing -= 1
        if not self.missing and not self.done.done():
            self.done.set_result(None)

    def unanswered(self, cmds: list) -> list:
        return [cmd for cmd, v in zip(cmds, self.values) if v is _UNANSWERED]


class Proposer:
    def __init__(self, replica: ProposerReplica, loop: asyncio.AbstractEventLoop, *,
                 render: Render | None = None, render_minimal: Render | None = None,
                 batch_commands_max: int = 1000, batch_bytes_max: int | None = None,
                 retry_backoff_s: float = 0.05, repropose_after_s: float = 3.0,
                 leader_poll_s: float = 0.05,
                 waiting_max: int = API_LIMITS.proposals_waiting_max) -> None:
        """`render(cmd, result)` runs on the Raft thread under the replica lock, straight
        after apply (results hold live references); its value is what `propose` returns.
        `render_minimal` (default: `render`) renders the commands whose every waiter asked
        for the minimal answer (`propose(..., minimal=)`)."""
        self._replica = replica
        self._loop = loop
        self._render = render
        self._render_minimal = render_minimal or render
        self._batch_commands_max = batch_commands_max
        self._batch_bytes_max = batch_bytes_max or replica.options.entry_bytes_max
        self._retry_backoff_s = retry_backoff_s
        self._repropose_after_s = repropose_after_s
        self._leader_poll_s = leader_poll_s
        self._waiting_max = waiting_max
        self.refused_full = 0              # sheddable proposals refused, queue full (metrics)
        self._waiters: dict[str, list[tuple[_Answers, int]]] = {}
        self._queue: list[tuple[Command, _Call]] = []
        self._flush_scheduled = False
        self.entries_proposed = 0          # Raft entries handed over (metrics, tests)
        replica.add_apply_listener(self._on_apply)

    # --- the loop side -------------------------------------------------------------------

    async def propose(self, cmds: list, timeout_s: float, *, sheddable: bool = False,
                      urgent: bool = False,
                      minimal: bool | Sequence[bool] = False) -> tuple[list[Rendered], int]:
        """Commit and apply `cmds`; return (one result per command, applied seq).

        `minimal` (every command, or per command): answered by `render_minimal` (RFC 7240
        `Prefer: return=minimal`), unless another waiter of its request id wants the full
        answer.

        `sheddable` (client submits): refused at once with `overloaded` when this node
        already waits for `waiting_max` commands, so that an overload is a fast 429 with
        Retry-After rather than latency growing without bound (DESIGN 14.2). A batch is
        admitted whole while the queue is not full (the bound is overshot by at most one
        batch): counting the batch itself would refuse a full-size batch beside any
        other, on an idle cluster. Reports, claims and the timer's commands are never
        shed: they drain the load. An `urgent` sheddable proposal (a submit whose every
        task is urgent, DESIGN 5.1) is refused only past `urgent_bound_factor` times the
        bound, so that overload sheds the lower tiers first."""
        if not cmds:
            return [], self._replica.applied_seq
        if sheddable:
            self._admit(len(cmds), urgent)
        deadline = self._loop.time() + timeout_s
        answers = _Answers(len(cmds), self._loop, minimal)
        waiters = self._waiters
        for i, cmd in enumerate(cmds):
            waiters.setdefault(cmd.request_id, []).append((answers, i))
        try:
            seq = await self._drive(cmds, answers, deadline)
        finally:
            self._unwait(cmds, answers)
        return answers.values, seq

    def _admit(self, n: int, urgent: bool) -> None:
        bound = self._waiting_max * (API_LIMITS.urgent_bound_factor if urgent else 1)
        if len(self._waiters) >= bound:
            self.refused_full += n
            raise ProposalError("overloaded", f"{len(self._waiters)} commands wait for "
                                f"commit at this node (at most {bound})")

    async def _drive(self, cmds: list[Command], answers: _Answers, deadline: float) -> int:
        call = _Call(self._loop)
        leader_seen = False
        while True:
            if not answers.missing:
                return answers.seq
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                raise ProposalError("timeout" if leader_seen else "no_leader",
                                    f"no answer within the deadline ({call.reason or 'waiting'})")
            leader = self._replica.leader_id()
            if leader is None:
                await self._wait(answers, call, min(remaining, self._leader_poll_s))
                continue
            leader_seen = True
            call.rearm(self._loop)
            self._enqueue(answers.unanswered(cmds), call)
            # A proposal forwarded to a leader that then died may never be reported failed:
            # re-propose as soon as another leader is known, not only after the fallback wait.
            await self._wait(answers, call, min(remaining, self._repropose_after_s), leader)
            if call.failed.done():
                await self._wait(answers, None, min(self._retry_backoff_s,
                                                    max(0.0, deadline - self._loop.time())))

    async def _wait(self, answers: _Answers, call: _Call | None, timeout_s: float,
                    leader: str | None = None) -> None:
        """Until every command has its answer, the call failed, the leader is no longer
        `leader` (when given), or the timeout, whichever first. (asyncio.wait never cancels
        what it waits on, unlike gather or wait_for.)"""
        end = self._loop.time() + timeout_s
        while True:
            remaining = end - self._loop.time()
            if answers.done.done() or remaining <= 0 or (call is not None and call.failed.done()):
                return
            if leader is not None and self._replica.leader_id() != leader:
                return
            waits = [answers.done]
            if call is not None:
                waits.append(call.failed)
            if leader is not None:
                remaining = min(remaining, self._leader_poll_s)
            await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)

    def _unwait(self, cmds: list[Command], answers: _Answers) -> None:
        waiters = self._waiters
        for cmd in cmds:
            entries = waiters.get(cmd.request_id)
            if entries is None:
                continue
            entries[:] = [e for e in entries if e[0] is not answers]
            if not entries:
                del waiters[cmd.request_id]

    def _enqueue(self, cmds: list[Command], call: _Call) -> None:
        self._queue.extend((cmd, call) for cmd in cmds)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        queue, self._queue = self._queue, []
        for i in range(0, len(queue), self._batch_commands_max):
            self._propose_chunk(queue[i:i + self._batch_commands_max])

    def _propose_chunk(self, chunk: list[tuple[Command, _Call]]) -> None:
        cmds = [cmd for cmd, _ in chunk]
        blob = self._replica.encode_batch(cmds)
        if len(blob) > self._batch_bytes_max and len(chunk) > 1:
            half = len(chunk) // 2
            self._propose_chunk(chunk[:half])
            self._propose_chunk(chunk[half:])
            return
        calls = list({id(c): c for _, c in chunk}.values())
        try:
            self._replica.propose_blob(blob, on_error=lambda reason: self._loop.call_soon_threadsafe(
                self._on_failure, calls, reason), cmds=cmds)
            self.entries_proposed += 1
        except Exception as exc:   # too large, or not started: the waiters time out
            log.error("proposal of %d commands refused: %r", len(chunk), exc)
            self._on_failure(calls, repr(exc))

    def _on_failure(self, calls: list[_Call], reason: str) -> None:
        for call in calls:
            call.fail(reason)

    # --- the Raft thread -----------------------------------------------------------------

    def _on_apply(self, seq: int, cmds: list, results: list) -> None:
        waiters = self._waiters
        answers: list[tuple[str, Rendered]] = []
        for cmd, result in zip(cmds, results):
            rid: str | None = getattr(cmd, "request_id", None)
            if rid is None:
                continue
            entries = waiters.get(rid)
            if entries:
                render = self._render_minimal if _all_minimal(entries) else self._render
                answers.append((rid, render(cmd, result) if render else result))
        if answers:
            self._loop.call_soon_threadsafe(self._resolve, answers, seq)

    def _resolve(self, answers: list[tuple[str, Rendered]], seq: int) -> None:
        waiters = self._waiters
        for rid, value in answers:
            for waiting, i in waiters.get(rid, ()):
                waiting.answer(i, value, seq)


def _all_minimal(entries: list[tuple[_Answers, int]]) -> bool:
    """Every waiter of a request id asked for the minimal answer. (Read on the Raft thread:
    a waiter of the same request id joining meanwhile, the same Idempotency-Key sent again
    at once with another Prefer, may get the other rendering.)"""
    return all(answers.wants_minimal(i) for answers, i in tuple(entries))
