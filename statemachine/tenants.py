"""Handlers and helpers that act on tenants: settings, and the capacity every new live task
needs (DESIGN section 5: per-tenant and global limits, refused with `tenant_limit`)."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from . import audit
from . import commands as c
from . import validate as V
from .errors import OVERLOADED, TENANT_LIMIT
from .model import TenantView
from .results import Answer, tenant_answer
from .validate import Rejected

if TYPE_CHECKING:
    from .limits import Limits
    from .machine import StateMachine


def tenant(sm: StateMachine, name: str) -> TenantView:
    """The tenant's view, made on first use."""
    view = sm.tenants.get(name)
    if view is None:
        view = sm.tenants[name] = TenantView(name)
    return view


def check_capacity(sm: StateMachine, name: str) -> None:
    """Refuse (`tenant_limit`) one more live task of tenant `name`, before any change."""
    lim = sm.limits
    view = sm.tenants.get(name)
    if view is None and len(sm.tenants) >= lim.tenants_max:
        raise Rejected(TENANT_LIMIT, f"at most {lim.tenants_max} tenants",
                       limit=lim.tenants_max)
    if sm.store.live >= lim.live_tasks_max:
        raise Rejected(TENANT_LIMIT, f"at most {lim.live_tasks_max} live tasks",
                       limit=lim.live_tasks_max)
    if view is not None and view.live >= lim.live_tasks_per_tenant_max:
        raise Rejected(TENANT_LIMIT, f"tenant {name} has "
                       f"{lim.live_tasks_per_tenant_max} live tasks",
                       limit=lim.live_tasks_per_tenant_max)


def shed_at(limits: Limits) -> int:
    """Live tasks from which low-priority submits are shed (integers only: deterministic)."""
    return limits.live_tasks_max * limits.shed_above_permille // 1000


def check_admission(sm: StateMachine, priority: int) -> None:
    """Shed (`overloaded`) a submit of priority numerically greater than
    `shed_priority_above` once live tasks reach `shed_at` (DESIGN 14.2). Only client
    submits are shed: a schedule's fire, a replay and higher priorities go on to the hard
    limits of check_capacity."""
    lim = sm.limits
    threshold = shed_at(lim)
    if priority > lim.shed_priority_above and sm.store.live >= threshold:
        raise Rejected(OVERLOADED, f"{sm.store.live} live tasks: submits of priority "
                       f"{priority} are shed above {threshold}", live=sm.store.live,
                       shed_above=threshold, priority=priority)


def set_tenant(sm: StateMachine, cmd: c.SetTenant) -> Answer:
    V.set_tenant(cmd, sm.limits)
    if cmd.tenant not in sm.tenants and len(sm.tenants) >= sm.limits.tenants_max:
        raise Rejected(TENANT_LIMIT, f"at most {sm.limits.tenants_max} tenants",
                       limit=sm.limits.tenants_max)
    known = cmd.tenant in sm.tenants
    view = tenant(sm, sys.intern(cmd.tenant))
    before = {"max_running": view.max_running, "weight": view.weight} if known else None
    if cmd.max_running is not None:
        view.max_running = cmd.max_running
    if cmd.weight is not None:
        view.weight = cmd.weight
    after = {"max_running": view.max_running, "weight": view.weight}
    audit.record(sm, cmd, "tenant.set", view.tenant, view.tenant, audit.diff(before, after))
    return tenant_answer(view.tenant)
