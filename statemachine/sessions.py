"""Worker sessions (DESIGN 9, "Worker sessions"): a worker that dies gives its tasks back
in seconds, not at the end of their leases.

A worker opens a session (`OpenSession`) with a timeout of a few seconds and keeps it
alive by talking to the leader (claims and light pings). Liveness is not replicated: it is
what the leader heard, by its own clock (node/scheduling/sessions.py). When the leader has
heard nothing from a worker for its timeout it proposes `EndSession(expired=True)`, and
this module gives back every task still leased to that worker, at once, by the command's
time: deterministic on every replica. A worker that was only cut off and reports late is
refused by fencing, as after any lease expiry. A stopping worker ends its session itself
(`EndSession`, not expired), after giving its unstarted tasks back.

Replicated: the sessions themselves (worker id, scope, timeout, when opened), so that a new
leader knows which workers asked for this and gives each a fresh full timeout. Kept in
snapshots under the optional head key `sessions` (absent: none).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import commands as c
from . import validate as V
from .errors import INVALID_ARGUMENT, NOT_FOUND, OK, TENANT_LIMIT
from .leases import cut_short
from .model import RUNNING, Task
from .results import Answer

if TYPE_CHECKING:
    from .machine import StateMachine

EXPIRED_ERROR = "worker session expired"   # the given-back attempt's error


class Session:
    """One worker's session. `tenant`: the scope of the caller that opened it (None: an
    admin or a cluster without auth); a scoped session gives back only its tenant's tasks."""

    __slots__ = ("worker_id", "tenant", "timeout_ms", "opened_ms")

    def __init__(self, worker_id: str, tenant: str | None, timeout_ms: int,
                 opened_ms: int) -> None:
        self.worker_id, self.tenant = worker_id, tenant
        self.timeout_ms, self.opened_ms = timeout_ms, opened_ms

    def record(self) -> list:
        return [self.worker_id, self.tenant, self.timeout_ms, self.opened_ms]


def _check(cmd: V.Unchecked, sm: StateMachine) -> Session | None:
    lim = sm.limits
    V.string("worker_id", cmd.worker_id, lim.id_chars_max)
    V.scope(cmd, lim)
    session = sm.sessions.get(cmd.worker_id)
    if session is not None and session.tenant != cmd.tenant and cmd.tenant is not None:
        # another scope's worker id: as if there were none (no probing across tenants)
        raise V.Rejected(NOT_FOUND, f"worker {cmd.worker_id} has no session of this tenant",
                         worker_id=cmd.worker_id)
    return session


def open_session(sm: StateMachine, cmd: c.OpenSession) -> Answer:
    """Open, or change the timeout of, the worker's session."""
    session = _check(cmd, sm)
    lim = sm.limits
    V.integer("timeout_ms", cmd.timeout_ms, lim.session_timeout_ms_min,
              lim.session_timeout_ms_max)
    created = session is None
    if session is None:
        if len(sm.sessions) >= lim.sessions_max:
            raise V.Rejected(TENANT_LIMIT, f"at most {lim.sessions_max} worker sessions",
                             limit="sessions_max")
        session = sm.sessions[cmd.worker_id] = Session(cmd.worker_id, cmd.tenant,
                                                       cmd.timeout_ms, sm.now_ms)
    session.timeout_ms = cmd.timeout_ms
    return session_answer(session, created, 0)


def end_session(sm: StateMachine, cmd: c.EndSession) -> Answer:
    """Remove the session; expired, give the worker's tasks back first."""
    session = _check(cmd, sm)
    if type(cmd.expired) is not bool:
        raise V.Rejected(INVALID_ARGUMENT, "expired must be a boolean", field="expired")
    if session is None:
        raise V.Rejected(NOT_FOUND, f"worker {cmd.worker_id} has no session",
                         worker_id=cmd.worker_id)
    del sm.sessions[cmd.worker_id]
    given = give_back(sm, session) if cmd.expired else 0
    return session_answer(session, False, given)


def give_back(sm: StateMachine, session: Session) -> int:
    """Every task still leased to the session's worker, in submission order (the running
    listing: O(running tasks), paid once per expired session)."""
    held: list[Task] = [t for t in sm.store.by_state[RUNNING].oldest_first()
                        if t.worker_id == session.worker_id
                        and (session.tenant is None or t.tenant == session.tenant)]
    for task in held:
        cut_short(sm, task, EXPIRED_ERROR)
    return len(held)


def session_answer(session: Session, created: bool, given_back: int) -> Answer:
    return (OK, "", None, "session", [*session.record(), created, given_back])


def records(sm: StateMachine) -> list[list]:
    """Snapshot and digest form: by worker id."""
    return [sm.sessions[w].record() for w in sorted(sm.sessions)]


def restore(sm: StateMachine, rows: object) -> None:
    """From a snapshot's `sessions` (absent or None: none)."""
    if rows is None:
        return
    if not isinstance(rows, (list, tuple)):
        raise ValueError("snapshot: sessions must be a list")
    for row in rows:
        worker_id, tenant, timeout_ms, opened_ms = row
        if type(worker_id) is not str or type(timeout_ms) is not int \
                or type(opened_ms) is not int or not (tenant is None or type(tenant) is str):
            raise ValueError("snapshot: a malformed session")
        sm.sessions[worker_id] = Session(worker_id, tenant, timeout_ms, opened_ms)
