"""A task submit decided (POST /v1/tasks, one task or a batch; DESIGN.md sections 7, 14.2):
the caller's scope checked against each task's tenant, the node's admission asked with
the tasks' priorities, the commands proposed. The API parses the request once
(api/submission.py `parse_submit`) and renders the answer (api/tasks.py)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tsched.statemachine import commands as c

from tsched.node.errors import ApiError
from tsched.node.raft.commit import Proposing, propose, propose_one
from tsched.node.scheduling.claim_request import ItemAnswer


@dataclass(frozen=True, slots=True)
class SubmitRequest:
    """A submit, parsed and bounded: its commands (built by the parse, which checks each
    task's fields into its `SubmitTask` directly: the hottest write path builds one object
    per task), and the rest of the request that the decision and the answer need."""

    commands: tuple[c.SubmitTask, ...]   # one, or a batch's in order (request ids `#i`)
    priorities: tuple[int, ...]          # the tasks' priorities, for the node's admission
    tenant: str | None = None            # the caller's token's tenant scope
    batch: bool = False                  # `{"tasks": [...]}`: answered `{"tasks": [...]}`
    minimal: bool = False                # `Prefer: return=minimal`


class Admitting(Protocol):
    """A submit's place at the node (api/admission.py `Place`): asked once the body is
    read; raises `overloaded` when a busy node turns the submit away."""

    @property
    def urgent(self) -> bool: ...

    def admit(self, priorities: Sequence[int]) -> None: ...


async def submit(node: Proposing, req: SubmitRequest,
                 place: Admitting) -> tuple[list[ItemAnswer], int]:
    """Propose a submit's tasks: (one answer per task, rendered or, in a batch, an
    ApiError; applied seq). One task (not a batch) raises its ApiError instead."""
    scope = req.tenant
    if scope is not None:
        for cmd in req.commands:
            if cmd.tenant != scope:
                raise ApiError("forbidden", f"this token may only act for tenant {scope!r}")
    place.admit(req.priorities)
    if not req.batch:
        task, seq = await propose_one(node, req.commands[0], sheddable=True,
                                      urgent=place.urgent, minimal=req.minimal)
        return [task], seq
    answers, seq = await propose(node, list(req.commands), sheddable=True,
                                 urgent=place.urgent, minimal=req.minimal)
    return answers, seq
