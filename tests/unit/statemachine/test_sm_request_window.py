"""The request table keeps every id for its window (statemachine/request_table.py), timed
ids (statemachine/request_ids.py) expire, and the times survive snapshots."""
from __future__ import annotations

import hashlib

import msgpack
from sm_support import T0, Driver

from tsched.client._core import new_key
from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import commands as c
from tsched.statemachine import errors as e
from tsched.statemachine.request_ids import key_time_ms, request_ids_for, request_time_ms
from tsched.statemachine.request_table import UNTIMED_MS

LIM = Limits()
KEPT_MS = LIM.request_window_ms + LIM.request_ahead_ms_max


def _rid(made_ms: int, n: int = 0) -> str:
    """The request id the node derives from a key tsched's client made at `made_ms`."""
    return request_ids_for("acme", "POST", "/v1/tasks", new_key(made_ms))(f"#{n}")


def _submit(d: Driver, rid: str, task_id: str):
    return d.run(c.SubmitTask, request_id=rid, task_id=task_id, tenant="acme",
                 task_type="email")


def test_a_retry_after_more_than_100000_writes_is_applied_once() -> None:
    """At the design's peak, 100,000 writes are 10 s: the client still retries then."""
    d = Driver()
    early = _rid(T0)
    assert _submit(d, early, "first").ok
    for start in range(0, 100_001, 10_000):   # 100,001 recorded writes (not_found answers)
        d.sm.apply_batch([c.Cancel(request_id=f"fill-{i}", now_ms=d.now, task_id="nope")
                          for i in range(start, min(start + 10_000, 100_001))])
    d.now += 10_000
    again = _submit(d, early, "second")   # the node makes a new task id for the retry
    assert again.ok and again.value["task"].task_id == "first"
    assert "second" not in d.sm.tasks and len(d.sm.tasks) == 1


def test_an_id_older_than_the_window_is_refused_and_not_recorded() -> None:
    d = Driver()
    rid = _rid(T0 - LIM.request_window_ms)
    assert _submit(d, rid, "in").ok                       # exactly the window: applied
    late = _rid(T0 - LIM.request_window_ms - 1)
    refused = _submit(d, late, "late")
    assert refused.code == e.REQUEST_EXPIRED and refused.details["window_ms"] == 120_000
    assert "late" not in d.sm.tasks and late not in d.sm.requests
    d.now += KEPT_MS + 1          # the first one's retries: answered while in the table,
    assert _submit(d, rid, "in-again").value["task"].task_id == "in"
    assert _submit(d, "filler", "f").ok                    # then evicted by a write,
    assert rid not in d.sm.requests
    assert _submit(d, rid, "in-again").code == e.REQUEST_EXPIRED   # then refused
    assert "in-again" not in d.sm.tasks


def test_an_id_too_far_ahead_of_the_state_clock_is_refused() -> None:
    d = Driver()
    assert _submit(d, _rid(T0 + LIM.request_ahead_ms_max), "edge").ok
    ahead = _submit(d, _rid(T0 + LIM.request_ahead_ms_max + 1), "ahead")
    assert ahead.code == e.INVALID_ARGUMENT and ahead.details["reason"] == "ahead"
    assert "ahead" not in d.sm.tasks


def test_an_id_ahead_stays_in_the_table_until_it_expires() -> None:
    """Recorded at T0 with a time T0 + ahead: expires at T0 + ahead + window, kept as long."""
    d = Driver()
    rid = _rid(T0 + LIM.request_ahead_ms_max)
    assert _submit(d, rid, "first").ok
    d.now = T0 + KEPT_MS
    assert _submit(d, f"other-{d.now}", "filler").ok        # a write: evicts what expired
    assert rid in d.sm.requests
    assert _submit(d, rid, "second").value["task"].task_id == "first"
    d.now += 1
    assert _submit(d, f"other-{d.now}", "filler2").ok
    assert rid not in d.sm.requests
    assert _submit(d, rid, "third").code == e.REQUEST_EXPIRED


def test_untimed_ids_are_kept_for_the_window_then_evicted_by_time() -> None:
    d = Driver()
    for i in range(3):
        assert _submit(d, f"old-{i}", f"t{i}").ok           # untimed: node-made ids
    d.now += KEPT_MS
    assert _submit(d, "mid", "m").ok
    assert list(d.sm.requests) == ["old-0", "old-1", "old-2", "mid"]   # not yet past
    d.now += 1
    assert _submit(d, "new", "n").ok
    assert list(d.sm.requests) == ["mid", "new"]
    assert d.sm.request_times.as_runs() == [[T0 + KEPT_MS, 1], [T0 + KEPT_MS + 1, 1]]
    assert _submit(d, "old-0", "again").value["task"].task_id == "again"   # forgotten


def test_eviction_work_per_write_is_bounded() -> None:
    d = Driver()
    d.sm.apply_batch([c.Cancel(request_id=f"r{i}", now_ms=T0, task_id="x")
                      for i in range(20)])
    d.now += KEPT_MS + 1
    assert _submit(d, "one", "t").ok
    assert len(d.sm.requests) == 20 + 1 - 4                   # EVICTED_PER_WRITE


def test_a_full_table_of_ids_in_their_window_refuses_new_writes() -> None:
    lim = Limits(requests_max=3)
    d = Driver(lim)
    for i in range(3):
        assert _submit(d, f"r{i}", f"t{i}").ok
    full = _submit(d, "r3", "t3")
    assert full.code == e.TENANT_LIMIT and full.details["limit"] == "requests_max"
    assert "t3" not in d.sm.tasks and "r3" not in d.sm.requests
    assert _submit(d, "r0", "again").value["task"].task_id == "t0"   # repeats still answered
    d.now += KEPT_MS + 1
    assert _submit(d, "r3", "t3").ok


def test_snapshots_keep_the_times_and_replicas_evict_alike() -> None:
    d = Driver()
    for i in range(5):
        assert _submit(d, _rid(d.now, i), f"t{i}").ok
        d.now += 40_000
    twin = StateMachine.restore(d.sm.snapshot())
    assert twin.request_times.as_runs() == d.sm.request_times.as_runs()
    assert list(twin.requests) == list(d.sm.requests)
    assert twin.state_digest() == d.sm.state_digest()
    d.now += 100_000
    cmd = c.Cancel(request_id="late", now_ms=d.now, task_id="t0")
    assert [r.code for r in d.sm.apply_batch([cmd])] == [r.code for r in twin.apply_batch([cmd])]
    assert list(twin.requests) == list(d.sm.requests) and len(d.sm.requests) < 6
    assert twin.digest() == d.sm.digest() and twin.state_digest() == d.sm.state_digest()
    assert twin.request_times.as_runs() == d.sm.request_times.as_runs()


def test_a_format_4_table_is_untimed_and_leaves_by_the_count_bound() -> None:
    lim = Limits(requests_max=3)
    d = Driver(lim)
    for i in range(2):
        assert _submit(d, f"r{i}", f"t{i}").ok
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(d.sm.snapshot())
    head, chunk, records, _times = (unpacker.unpack() for _ in range(4))
    blob = b"".join(msgpack.packb(p, use_bin_type=True)
                    for p in (dict(head, v=4), chunk, records))
    old = StateMachine.restore(blob, lim)
    assert old.request_times.as_runs() == [[UNTIMED_MS, 2]]
    assert old.state_digest() == d.sm.state_digest()
    assert StateMachine.restore(old.snapshot(), lim).request_times.as_runs() == [[-1, 2]]
    later = T0 + 10 * KEPT_MS
    for rid in ("a", "b"):   # never evicted by time; the count bound takes the oldest
        old.apply(c.Cancel(request_id=rid, now_ms=later, task_id="x"))
    assert list(old.requests) == ["r1", "a", "b"]


# --- the key format: tsched's client and the state machine's parser agree --------------------

def test_the_clients_keys_carry_their_time_for_the_parser() -> None:
    key = new_key(T0)
    assert key.startswith("tsched1-1700000000000-") and len(key) == 8 + 13 + 1 + 32
    assert key_time_ms(key) == T0
    assert key_time_ms(new_key()) > T0 and new_key(T0) != key
    rid = request_ids_for("", "POST", "/v1/tasks", key)("#0")
    assert rid.startswith(f"idem-{T0}-") and request_time_ms(rid) == T0
    assert len(rid + ".999") <= LIM.id_chars_max
    assert request_time_ms(rid + ".3") == T0                 # a claim's ids


def test_other_keys_and_node_ids_are_untimed_and_derived_as_before() -> None:
    for key in ("abc", "tsched1-", "tsched1-123", "tsched1-12a-x", "tsched1--x",
                "tsched1-" + "1" * 17 + "-x", "tsched1-١٢٣-x", "tsched2-123-x"):
        assert key_time_ms(key) is None, key
    head = "\n".join(("acme", "POST", "/v1/tasks", "abc"))
    assert request_ids_for("acme", "POST", "/v1/tasks", "abc")("#1") == \
        "idem-" + hashlib.sha256((head + "#1").encode()).hexdigest()
    for rid in ("idem-" + "a" * 64, "0123456789abcdef" * 2, "idem-12x-y", "req-7"):
        assert request_time_ms(rid) is None, rid
