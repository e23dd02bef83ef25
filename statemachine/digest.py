"""The digests: a rolling one on the hot path, the full state digest on demand.

Replicas at the same applied seq must compare equal, and a replica that applied
differently must be found (DESIGN section 3, point 5). Two values serve that:

- The *rolling* value (`roll`, 16 bytes), advanced once per applied batch:
  `roll = BLAKE2b-128(roll || len(bytes) || the batch's bytes || its result codes)`. Every
  replica applies the same log in the same order, so at equal seq the rolls are equal;
  a replica whose inputs differ (a corrupted entry) or whose results differ (it refused
  what others accepted, or the reverse) differs from that batch on, for good. It costs one
  hash over bytes already in memory per Raft entry, nothing per task. `hexdigest(sm)` (what
  `GET /v1/cluster` shows) is the SHA-256 of the counters, the collections' sizes and the
  roll: O(1) at a million tasks.
- The *state* digest (`full_hexdigest`), a hash over every record, finds a divergence of
  state that left every result code alike. It costs a pass over the state, so it is not
  kept up to date: it is computed on demand (`StateMachine.state_digest`: the tests, among
  them the check that the compiled and the Python builds agree). From format 4 snapshots
  carried it in their head; the key is now left empty, as a re-shard's always was (the
  format is unchanged: no reader ever checked it). At 100,000 tasks it was 40-60 % of a
  snapshot's CPU, paid at every compaction, for a value nothing read back
  (bench/notes/2026-12-07-lifecycles-cpu-ceiling.md).

A snapshot (format 4) carries the roll, so a restored replica continues the same value as
its peers. A format 1-3 snapshot carries none: its roll starts from the hash of the
snapshot's bytes, so replicas that restore the same snapshot agree (see snapshot.py).

State digest definition (equal replicated states give equal digests whatever their history):
each task, tenant and schedule has an item hash (the first 128 bits of the SHA-256 of its
canonical record, `codec.pack(codec.task_record(t))`, ...); each keyed collection
contributes its size and the sum of its item hashes mod 2**128; the request table, a FIFO
whose order decides evictions, contributes sum(h_i * B**(n-1-i)) mod 2**127-1 over its
entries oldest first; the digest is the SHA-256 of the counters with those sizes and sums.
The audit trail (audit.py) adds its last id, its length and the same polynomial over its
entries, once it ever held one (so the digest of a state without one is unchanged).
Running tasks' progress (store.progress, DESIGN 9) adds its records, by task id, while
there are any.
The times the request table's entries were recorded (request_table.py) are not hashed:
each is the state clock (hashed) when its entry was added, so they follow from the log
as the entries do, and a replica whose times differed would evict differently, which the
table's contribution then shows. (Hashing them would change the state digest of every
state with a request table: a state restored from an older snapshot would no longer show
the digest its writer's replicas did after the same commands.)
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import audit, codec
from .graphs import workflow_record

if TYPE_CHECKING:
    from .machine import StateMachine
    from .model import Schedule, Task, TenantView

DIGEST_FORMAT = 2          # of the state digest
ROLLING_FORMAT = 3         # of `hexdigest` (the rolling digest)
ROLL_START = bytes(16)     # the roll of an empty state
SUM_MOD = 1 << 128
POLY_MOD = (1 << 127) - 1          # a Mersenne prime
POLY_BASE = int.from_bytes(hashlib.sha256(b"tsched request table").digest()[:15], "big")
_blake2b = hashlib.blake2b


# hashlib lets go of the GIL to hash 2,048 bytes or more. The roll is computed on the Raft
# thread while the node's event loop is busy, and taking the GIL back then waits out the
# loop's switch interval: hashing a 61 KB entry beside a busy thread took 4.4-5.7 ms in
# one piece and 0.31-0.34 ms in pieces that keep the GIL (the same digest either way).
_GIL_KEPT_BYTES = 2_047


def _update(h: hashlib.blake2b, data: bytes) -> None:
    view = memoryview(data)
    for i in range(0, len(view), _GIL_KEPT_BYTES):
        h.update(view[i:i + _GIL_KEPT_BYTES])


def roll_step(roll: bytes, raw: bytes, codes: Iterable[str]) -> bytes:
    """The roll after a batch: its bytes as committed and the result code of each command
    (a code is a short ASCII name, errors.py; joined with NUL, which no code contains)."""
    h = _blake2b(roll, digest_size=16)
    h.update(len(raw).to_bytes(8, "big"))
    _update(h, raw)
    _update(h, "\0".join(codes).encode())
    return h.digest()


def roll_from_blob(version: int, blob: bytes | bytearray | memoryview) -> bytes:
    """The roll of a state restored from a snapshot that carried none (formats 1-3)."""
    return _blake2b(b"tsched snapshot v%d" % version + bytes(blob), digest_size=16).digest()


def hexdigest(sm: StateMachine) -> str:
    """The rolling digest (what replicas compare): O(1)."""
    head = [ROLLING_FORMAT, sm.seq, sm.now_ms, sm.cluster_token, sm.task_seq, len(sm.tasks),
            len(sm.tenants), len(sm.schedules), len(sm.requests), sm.roll]
    return hashlib.sha256(codec.pack(head)).hexdigest()


def item_hash(encoded: bytes | memoryview) -> int:
    """128-bit hash of one canonical record (bytes or a memoryview of them)."""
    return int.from_bytes(hashlib.sha256(encoded).digest()[:16], "big")


def task_hash(task: Task) -> int:
    return item_hash(codec.pack(codec.task_record(task)))


def tenant_hash(view: TenantView) -> int:
    return item_hash(codec.pack(codec.tenant_record(view)))


def schedule_hash(sched: Schedule) -> int:
    return item_hash(codec.pack(codec.schedule_record(sched)))


def request_hash(request_id: str, rec: tuple) -> int:
    return item_hash(codec.pack(codec.request_record(request_id, rec)))


def _combine(sm: StateMachine, tasks_acc: int, tenants_acc: int, schedules_acc: int,
             requests_acc: int) -> str:
    head = [DIGEST_FORMAT, sm.seq, sm.now_ms, sm.cluster_token, sm.task_seq,
            len(sm.tasks), tasks_acc.to_bytes(16, "big"),
            len(sm.tenants), tenants_acc.to_bytes(16, "big"),
            len(sm.schedules), schedules_acc.to_bytes(16, "big"),
            len(sm.requests), requests_acc.to_bytes(16, "big")]
    if sm.audit.seq:   # a state that never recorded an entry keeps its digest
        head += [sm.audit.seq, len(sm.audit.entries), audit_acc(sm).to_bytes(16, "big")]
    limiter = sm.store.limiter
    if limiter.defs or limiter.limited:   # a state that never had a limit keeps its digest
        head += [limiter.records(sm.now_ms), limiter.task_limits()]
    pauses = sm.store.pauses
    if pauses.by_key:   # and a state without a standing pause (pauses.py)
        head += ["queue_pauses", pauses.records()]
    if sm.sessions:   # worker sessions (sessions.py): a state without any keeps its digest
        head += ["sessions", [sm.sessions[w].record() for w in sorted(sm.sessions)]]
    if sm.workflows.seq:   # likewise a state that never had a workflow
        head += [sm.workflows.seq, sm.workflows.finish_seq, workflows_acc(sm).to_bytes(16, "big")]
    if sm.store.progress:   # and one whose running tasks report no progress
        head += ["task_progress", sm.store.progress_records()]
    return hashlib.sha256(codec.pack(head)).hexdigest()


def audit_acc(sm: StateMachine) -> int:
    """The audit trail, in order (ids increase): sum of h_i * B**(n-1-i), like the request
    table's."""
    acc = 0
    for e in sm.audit.entries:
        acc = (acc * POLY_BASE + item_hash(codec.pack(audit.entry_record(e)))) % POLY_MOD
    return acc


def workflows_acc(sm: StateMachine) -> int:
    """The workflows, in submission order."""
    acc = 0
    for w in sm.workflows.by_id.values():
        acc = (acc * POLY_BASE + item_hash(codec.pack(workflow_record(w)))) % POLY_MOD
    return acc


def full_hexdigest(sm: StateMachine) -> str:
    """The state digest, from scratch: O(state)."""
    tasks = sum(task_hash(t) for t in sm.tasks.values()) % SUM_MOD
    tenants = sum(tenant_hash(v) for v in sm.tenants.values()) % SUM_MOD
    schedules = sum(schedule_hash(s) for s in sm.schedules.values()) % SUM_MOD
    requests = 0
    for request_id, rec in sm.requests.items():
        requests = (requests * POLY_BASE + request_hash(request_id, rec)) % POLY_MOD
    return _combine(sm, tasks, tenants, schedules, requests)
