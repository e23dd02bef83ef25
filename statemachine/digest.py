"""The state digest, kept up to date in O(changes since the last call), not O(state).

A node hashes its state on every `GET /v1/cluster`, under the replica lock that the Raft
thread also needs, so the digest must not cost a pass over a million tasks.

Definition (equal replicated states give equal digests whatever their history):
- each task, tenant and schedule has an *item hash*: the first 128 bits of the SHA-256 of
  its canonical record (`codec.pack(codec.task_record(t))`, ...), read as an integer;
- each keyed collection contributes its size and the sum of its item hashes mod 2**128
  (a sum does not depend on the order of anything: records carry their own keys and the
  snapshot's order is derived from them);
- the request table is a FIFO whose order decides evictions, so its order counts: it
  contributes the polynomial sum(h_i * B**(n-1-i)) mod the prime 2**127-1 over its entries
  oldest first (appending is `acc * B + h`, evicting the oldest subtracts `h_0 * B**(n-1)`);
- the digest is the SHA-256 of the canonical encoding of the counters (seq, now_ms,
  cluster_token, task_seq) with those sizes and sums.

Keeping it current: every place that creates, changes or removes an item *marks* it
(`KeyedSum.mark`, an insertion-ordered dict of key -> the object first marked); `fold`
subtracts the hash last folded in for that key (kept on the object, in its `dh` slot) and
adds the current object's fresh hash. Marking more than needed costs a re-hash, marking
less is a silent divergence: `full_hexdigest` recomputes everything from scratch, and the
tests compare the two after every command. A mark comes before the change it announces.
Folding late saves work: a task submitted, claimed and completed between two folds is
hashed once. So the machine folds only the changes beyond a window (the oldest first, a
key marked again moving to the back), and `hexdigest` folds the rest; a caller holding a
lock can fold in slices first (`fold_some`).

Restored tasks are not hashed one by one: a snapshot (format 3) carries the tasks' sum as
its writer had folded it, and each restored task's `dh` is `UNHASHED` until it is first
marked, when its hash is computed from the record as restored, before the change the mark
announces (hence the rule above). Why trusting the sum is safe: the snapshot file's SHA-256
(node/raft.py) guarantees the reader has the writer's bytes; the writer computed the sum
from the very records it wrote (it folds before encoding), so the restored state's digest
equals the writer's, as a full re-hash would give; and a replica whose state diverged
writes its own records and its own sum, so its digest still differs from its peers'. A
restored task then costs no hashing at restart and no 128-bit int until it changes. The
request table's item hashes travel in the snapshot the same way (the FIFO needs each one
to evict it), for the same reasons.
"""
from __future__ import annotations

import hashlib
from collections import deque
from itertools import islice

from . import codec

DIGEST_FORMAT = 2
SUM_MOD = 1 << 128
POLY_MOD = (1 << 127) - 1          # a Mersenne prime
POLY_BASE = int.from_bytes(hashlib.sha256(b"tsched request table").digest()[:15], "big")
_POLY_BASE_INV = pow(POLY_BASE, -1, POLY_MOD)


# A restored task's `dh` until its first mark (see above). Not an int: folding it by mistake
# fails loudly instead of yielding a wrong digest.
_ABSENT = object()

UNHASHED = type("Unhashed", (), {"__repr__": lambda self: "UNHASHED", "__slots__": ()})()


def item_hash(encoded) -> int:
    """128-bit hash of one canonical record (bytes or a memoryview of them)."""
    return int.from_bytes(hashlib.sha256(encoded).digest()[:16], "big")


def task_hash(task) -> int:
    return item_hash(codec.pack(codec.task_record(task)))


def tenant_hash(view) -> int:
    return item_hash(codec.pack(codec.tenant_record(view)))


def schedule_hash(sched) -> int:
    return item_hash(codec.pack(codec.schedule_record(sched)))


def request_hash(request_id: str, rec: tuple) -> int:
    return item_hash(codec.pack(codec.request_record(request_id, rec)))


class KeyedSum:
    """Sum mod 2**128 of the item hashes of a dict's values, folded in lazily."""

    __slots__ = ("items", "hash_of", "acc", "dirty")

    def __init__(self, items: dict, hash_of) -> None:
        self.items = items          # the machine's live dict (key -> object with a `dh` slot)
        self.hash_of = hash_of
        self.acc = 0
        self.dirty: dict = {}       # key -> the object under that key when first marked

    def mark(self, key, obj) -> None:
        """`obj` (under `key`) is about to be created, changed or removed. A key marked
        again moves to the back of `dirty` (keeping the object first marked): folds take
        the oldest first, so an item that keeps changing is hashed once, when it settles."""
        if obj.dh is UNHASHED:   # restored, never marked: its hash as it was summed
            obj.dh = self.hash_of(obj)
        dirty = self.dirty
        first = dirty.pop(key, _ABSENT)
        dirty[key] = obj if first is _ABSENT else first

    def loaded(self, total: int) -> None:
        """Objects were folded in by their loader (a restore set each one's `dh`, or left
        it `UNHASHED`): `total` is the sum of their hashes."""
        self.acc = (self.acc + total) % SUM_MOD

    def fold(self, limit: int | None = None) -> None:
        """Fold in every marked key, or the `limit` marked longest ago."""
        dirty = self.dirty
        whole = limit is None or limit >= len(dirty)
        taken = dirty.items() if whole else list(islice(dirty.items(), limit))
        acc, items, hash_of = self.acc, self.items, self.hash_of
        for key, first in taken:
            if first.dh is not None:
                acc -= first.dh
                first.dh = None
            current = items.get(key)
            if current is not None:
                if current.dh is not None:   # folded in under this key already
                    acc -= current.dh
                current.dh = hash_of(current)
                acc += current.dh
        if whole:
            dirty.clear()
        else:
            for key, _ in taken:
                del dirty[key]
        self.acc = acc % SUM_MOD


class FifoHash:
    """Order-sensitive hash of the request table (insertions at the end, evictions at the
    front only). Insertions need no mark: the entries not yet folded are the table's last
    ones; evictions are counted by `evicted`."""

    __slots__ = ("table", "hashes", "acc", "evictions")

    def __init__(self, table) -> None:
        self.table = table          # the machine's OrderedDict request_id -> record
        self.hashes: deque[int] = deque()   # item hashes folded in, oldest first
        self.acc = 0
        self.evictions = 0

    def evicted(self) -> None:
        self.evictions += 1

    def unfolded(self) -> int:
        """Entries added or evicted since the last fold (what the next fold will cost)."""
        return self.evictions + max(0, len(self.table) - len(self.hashes))

    def add_folded(self, h: int) -> None:
        """Append an entry already hashed (a restore, oldest first, nothing evicted)."""
        self.hashes.append(h)
        self.acc = (self.acc * POLY_BASE + h) % POLY_MOD

    def fold(self) -> None:
        hashes, acc = self.hashes, self.acc
        n = len(hashes)
        gone = min(self.evictions, n)
        if gone:
            power = pow(POLY_BASE, n - 1, POLY_MOD)
            for _ in range(gone):
                acc -= hashes.popleft() * power
                power = power * _POLY_BASE_INV % POLY_MOD
            acc %= POLY_MOD
        self.evictions = 0
        new = len(self.table) - len(hashes)
        if new < 0:   # cannot happen while every eviction is counted; recount rather than lie
            hashes.clear()
            acc, new = 0, len(self.table)
        if new:
            tail = list(islice(reversed(self.table.items()), new))
            for request_id, rec in reversed(tail):
                h = request_hash(request_id, rec)
                hashes.append(h)
                acc = (acc * POLY_BASE + h) % POLY_MOD
        self.acc = acc


class StateDigest:
    """The incremental digest of one StateMachine (derived state, rebuilt by restore)."""

    __slots__ = ("sm", "tasks", "tenants", "schedules", "requests")

    def __init__(self, sm) -> None:
        self.sm = sm
        self.tasks = KeyedSum(sm.tasks, task_hash)
        self.tenants = KeyedSum(sm.tenants, tenant_hash)
        self.schedules = KeyedSum(sm.schedules, schedule_hash)
        self.requests = FifoHash(sm.requests)

    def mark_all(self) -> None:
        """Everything but the tasks is to be (re)hashed: after a restore."""
        for name, view in self.sm.tenants.items():
            self.tenants.mark(name, view)
        for key, sched in self.sm.schedules.items():
            self.schedules.mark(key, sched)

    def fold(self) -> None:
        for part in (self.tasks, self.tenants, self.schedules, self.requests):
            part.fold()

    def backlog(self) -> int:
        """Changes not yet folded in: what `hexdigest` would hash now."""
        return (len(self.tasks.dirty) + len(self.tenants.dirty) + len(self.schedules.dirty)
                + self.requests.unfolded())

    def fold_some(self, items_max: int) -> int:
        """Fold up to about `items_max` of the oldest changes; the backlog left."""
        self.tasks.fold(items_max)
        if not self.tasks.dirty:
            for part in (self.tenants, self.schedules, self.requests):
                part.fold()
        return self.backlog()

    def hexdigest(self) -> str:
        self.fold()
        sm = self.sm
        return _combine(sm, self.tasks.acc, self.tenants.acc, self.schedules.acc,
                        self.requests.acc)


def _combine(sm, tasks_acc: int, tenants_acc: int, schedules_acc: int,
             requests_acc: int) -> str:
    head = [DIGEST_FORMAT, sm.seq, sm.now_ms, sm.cluster_token, sm.task_seq,
            len(sm.tasks), tasks_acc.to_bytes(16, "big"),
            len(sm.tenants), tenants_acc.to_bytes(16, "big"),
            len(sm.schedules), schedules_acc.to_bytes(16, "big"),
            len(sm.requests), requests_acc.to_bytes(16, "big")]
    return hashlib.sha256(codec.pack(head)).hexdigest()


def full_hexdigest(sm) -> str:
    """The same digest computed from scratch, using no incremental bookkeeping: the
    reference the incremental one is tested against."""
    tasks = sum(task_hash(t) for t in sm.tasks.values()) % SUM_MOD
    tenants = sum(tenant_hash(v) for v in sm.tenants.values()) % SUM_MOD
    schedules = sum(schedule_hash(s) for s in sm.schedules.values()) % SUM_MOD
    requests = 0
    for request_id, rec in sm.requests.items():
        requests = (requests * POLY_BASE + request_hash(request_id, rec)) % POLY_MOD
    return _combine(sm, tasks, tenants, schedules, requests)
