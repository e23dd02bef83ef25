"""Handlers of paused queues (pauses.py, issue 48): PauseQueue and ResumeQueue."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import audit
from . import commands as c
from . import validate as V
from .errors import INVALID_ARGUMENT, NOT_FOUND, TENANT_LIMIT
from .pauses import ANY, Pause, selector_text
from .results import Answer, pause_answer
from .validate import Rejected

if TYPE_CHECKING:
    from .machine import StateMachine


def _validate(cmd: Any, sm: StateMachine) -> None:
    lim = sm.limits
    V.string("task_type", cmd.task_type, lim.task_type_chars_max, optional=True)
    V.string("tenant", cmd.tenant, lim.tenant_chars_max, optional=True)
    if cmd.task_type is None and cmd.tenant is None:
        raise Rejected(INVALID_ARGUMENT, "a pause names a task_type, a tenant, or both",
                       field="task_type")


def pause_queue(sm: StateMachine, cmd: c.PauseQueue) -> Answer:
    """Pause a selector. One already paused stays as it was (when, who, why): the answer
    says `changed` false and nothing is audited."""
    _validate(cmd, sm)
    V.string("reason", cmd.reason, sm.limits.pause_reason_chars_max, optional=True)
    pauses = sm.store.pauses
    key = (cmd.task_type or ANY, cmd.tenant or ANY)
    old = pauses.by_key.get(key)
    if old is not None:
        return pause_answer(old, False)
    if len(pauses) >= sm.limits.queue_pauses_max:
        raise Rejected(TENANT_LIMIT, f"at most {sm.limits.queue_pauses_max} pauses; resume "
                       "one first", limit=sm.limits.queue_pauses_max)
    pause = Pause(cmd.task_type, cmd.tenant, sm.now_ms, cmd.actor, cmd.reason)
    pauses.by_key[key] = pause
    audit.record(sm, cmd, "queue.pause", cmd.tenant, selector_text(cmd.task_type, cmd.tenant),
                 {"before": {"paused": False}, "after": {"paused": True, "reason": cmd.reason}})
    return pause_answer(pause, True)


def resume_queue(sm: StateMachine, cmd: c.ResumeQueue) -> Answer:
    """Lift a pause: its tasks are claimable again at once, in their claim order (the claim
    queue never dropped them)."""
    _validate(cmd, sm)
    key = (cmd.task_type or ANY, cmd.tenant or ANY)
    old = sm.store.pauses.by_key.pop(key, None)
    if old is None:
        text = selector_text(cmd.task_type, cmd.tenant)
        raise Rejected(NOT_FOUND, f"no pause of {text}", task_type=cmd.task_type,
                       tenant=cmd.tenant)
    audit.record(sm, cmd, "queue.resume", cmd.tenant, selector_text(cmd.task_type, cmd.tenant),
                 {"before": {"paused": True, "paused_at_ms": old.paused_at_ms},
                  "after": {"paused": False}})
    return pause_answer(old, True, resumed_at_ms=sm.now_ms)
