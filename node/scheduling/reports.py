"""A worker's reports made into commands and proposed: heartbeats, completions and failures
(one, a batch, or those a claim carries). What the items share (the clock reading, the
caller's scope, the failpoint) is read once per request, not once per item."""
from __future__ import annotations

from typing import Protocol

from tsched.statemachine import commands as c

from tsched.node.clock import Clock
from tsched.node.raft.commit import Proposing, propose, propose_one
from tsched.node.raft.replica import Replica
from tsched.node.scheduling.claim_request import (CompletionItem, HeartbeatItem, ItemAnswer,
                                                  Reports)

class Reporting(Proposing, Protocol):
    """What a report needs of the node's services (`services.Node` is one)."""

    replica: Replica
    clock: Clock


def heartbeat_commands(node: Reporting, items: tuple[HeartbeatItem, ...],
                       request_ids: tuple[str, ...], tenant: str | None) -> list[c.Heartbeat]:
    now = node.clock.now_ms()
    return [c.Heartbeat(request_id=rid, now_ms=now, task_id=it.task_id,
                        fencing_token=it.fencing_token, lease_ms=it.lease_ms, tenant=tenant,
                        progress_permille=it.progress_permille,
                        progress_message=it.progress_message)
            for it, rid in zip(items, request_ids)]


def completion_commands(node: Reporting, items: tuple[CompletionItem, ...],
                        request_ids: tuple[str, ...], tenant: str | None) -> list[c.Command]:
    now = node.clock.now_ms()
    stale = node.replica.failpoints.on("accept_stale_tokens")
    cmds: list[c.Command] = []
    for it, rid in zip(items, request_ids):
        token = _current_token(node, it.task_id, it.fencing_token) if stale else it.fencing_token
        if it.failing:
            cmds.append(c.Fail(request_id=rid, now_ms=now, task_id=it.task_id,
                               fencing_token=token, error=it.error, retryable=it.retryable,
                               tenant=tenant, retry_after_ms=it.retry_after_ms))
        else:
            cmds.append(c.Complete(request_id=rid, now_ms=now, task_id=it.task_id,
                                   fencing_token=token, result_json=it.result_json,
                                   tenant=tenant))
    return cmds


def _current_token(node: Reporting, task_id: str, token: int) -> int:
    """The failpoint `accept_stale_tokens` (failpoints.py): the token the task holds now."""
    with node.replica.read() as sm:
        task = sm.get_task(task_id)
        return task.fencing_token if task is not None and task.fencing_token else token


async def report(node: Reporting, reports: Reports) -> tuple[list[ItemAnswer], int]:
    """Propose a report's commands: (one answer per item, rendered or an ApiError; applied
    seq). One item (not a batch) raises its ApiError instead."""
    cmds: list[c.Heartbeat] | list[c.Command]
    if reports.heartbeats:
        cmds = heartbeat_commands(node, reports.heartbeats, reports.request_ids, reports.tenant)
    else:
        cmds = completion_commands(node, reports.completions, reports.request_ids,
                                   reports.tenant)
    if not reports.batch:
        answer, seq = await propose_one(node, cmds[0], minimal=reports.minimal)
        return [answer], seq
    return await propose(node, cmds, minimal=reports.minimal)
