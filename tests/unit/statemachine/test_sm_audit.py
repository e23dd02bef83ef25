"""The audit trail in the state machine (DESIGN 14.6): every operator action applied with
an actor is recorded with its change; refusals and actor-less commands are not; the trail
is bounded, evicts oldest first (handing the evicted entries out once), survives snapshots
and is part of the state digest."""
from __future__ import annotations

import json

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import codec
from tsched.statemachine import commands as c
from tsched.statemachine.audit import change_json

from sm_support import T0, Driver

TEMPLATE = c.TaskTemplate(task_type="report")


def _entries(sm: StateMachine, **query) -> list:
    return sm.audit_page(**query)[0]


def _change(e) -> dict:
    return json.loads(e.change_json)


def _dead_letter(d: Driver, task_id: str) -> None:
    d.add(task_id, max_retries=0, task_type=f"type-{task_id}")
    t = d.claim_one(task_types=(f"type-{task_id}",))
    d.ok(c.Fail, task_id=task_id, fencing_token=t.fencing_token, error="boom", retryable=False)


def test_task_actions_are_recorded_with_actor_and_change() -> None:
    d = Driver()
    d.add("t1")
    d.ok(c.Cancel, task_id="t1", actor="tenant:acme", request_id="r-cancel")
    _dead_letter(d, "t2")
    d.ok(c.Replay, task_id="t2", actor="admin")
    _dead_letter(d, "t3")
    d.ok(c.Discard, task_id="t3", actor="anonymous")
    newest = _entries(d.sm)
    assert [(e.action, e.actor, e.target, e.tenant) for e in newest] == [
        ("task.discard", "anonymous", "t3", "acme"), ("task.replay", "admin", "t2", "acme"),
        ("task.cancel", "tenant:acme", "t1", "acme")]
    cancel = newest[-1]
    assert cancel.request_id == "r-cancel" and cancel.at_ms == T0
    assert _change(cancel) == {"before": {"state": "pending"},
                               "after": {"state": "cancelled", "cancel_requested": False}}
    assert _change(newest[1])["after"]["state"] == "pending"
    assert _change(newest[0]) == {"before": {"state": "dead_letter"},
                                  "after": {"state": "discarded", "cancel_requested": False}}
    assert [e.id for e in newest] == [3, 2, 1]


def test_cancel_of_a_running_task_records_the_request() -> None:
    d = Driver()
    d.add("t1")
    d.claim_one()
    d.ok(c.Cancel, task_id="t1", actor="admin")
    (e,) = _entries(d.sm)
    assert _change(e) == {"before": {"state": "running"},
                          "after": {"state": "running", "cancel_requested": True}}


def _put(d: Driver, actor="admin", **fields):
    base = dict(tenant="acme", schedule_id="nightly", cron="0 3 * * *", template=TEMPLATE,
                next_fire_ms=T0 + 3_600_000, actor=actor)
    return d.ok(c.PutSchedule, **{**base, **fields})


def test_schedule_actions_record_changed_fields_only() -> None:
    d = Driver()
    _put(d)
    _put(d, cron="0 4 * * *", jitter_ms=5_000)
    d.ok(c.PauseSchedule, tenant="acme", schedule_id="nightly", actor="tenant:acme")
    d.ok(c.ResumeSchedule, tenant="acme", schedule_id="nightly", next_fire_ms=T0 + 1,
         actor="admin")
    d.ok(c.Fire, tenant="acme", schedule_id="nightly", fire_ms=T0, next_fire_ms=None,
         manual=True, actor="admin")
    d.ok(c.DeleteSchedule, tenant="acme", schedule_id="nightly", actor="admin")
    entries = _entries(d.sm)[::-1]
    assert [e.action for e in entries] == ["schedule.put", "schedule.put", "schedule.pause",
                                           "schedule.resume", "schedule.trigger",
                                           "schedule.delete"]
    assert {e.target for e in entries} == {"acme/nightly"}
    created, changed = _change(entries[0]), _change(entries[1])
    assert created["before"] is None and created["after"]["cron"] == "0 3 * * *"
    assert created["after"]["task"]["task_type"] == "report"
    assert changed == {"before": {"cron": "0 3 * * *", "jitter_ms": 0},
                       "after": {"cron": "0 4 * * *", "jitter_ms": 5_000}}
    assert _change(entries[2]) == {"before": {"paused": False}, "after": {"paused": True}}
    assert entries[2].actor == "tenant:acme"
    assert _change(entries[3]) == {"before": {"paused": True}, "after": {"paused": False}}
    assert _change(entries[4])["task_id"] in d.sm.tasks
    deleted = _change(entries[5])
    assert deleted["after"] is None and deleted["before"]["cron"] == "0 4 * * *"


def test_tenant_settings_record_before_and_after() -> None:
    d = Driver()
    d.ok(c.SetTenant, tenant="acme", max_running=5, actor="admin")
    d.ok(c.SetTenant, tenant="acme", weight=3, actor="admin")
    second, first = _entries(d.sm)
    assert _change(first) == {"before": None, "after": {"max_running": 5, "weight": 1}}
    assert _change(second) == {"before": {"weight": 1}, "after": {"weight": 3}}
    assert first.target == first.tenant == "acme"


def test_refusals_repeats_and_actorless_commands_record_nothing() -> None:
    d = Driver()
    assert d.run(c.Cancel, task_id="nope", actor="admin").code == "not_found"
    d.add("t1")
    assert d.run(c.Replay, task_id="t1", actor="admin").code == "invalid_state"
    assert d.run(c.PauseSchedule, tenant="acme", schedule_id="x", actor="admin").code \
        == "not_found"
    d.ok(c.Cancel, task_id="t1")                       # no actor: an older node's command
    _put(d, actor=None)
    d.ok(c.Fire, tenant="acme", schedule_id="nightly", fire_ms=T0 + 3_600_000,
         next_fire_ms=None, actor=None)                # the timer's fire
    assert _entries(d.sm) == [] and d.sm.audit.seq == 0
    d.add("t2")
    d.ok(c.Cancel, task_id="t2", actor="admin", request_id="same")
    d.ok(c.Cancel, task_id="t2", actor="admin", request_id="same")   # from the table
    assert len(_entries(d.sm)) == 1
    too_long = d.run(c.Cancel, task_id="t2", actor="x" * 129)
    assert too_long.code == "invalid_argument" and too_long.details["field"] == "actor"


def test_audit_note_records_a_transfer_and_nothing_else() -> None:
    d = Driver()
    d.ok(c.AuditNote, actor="admin", action="cluster.transfer_leadership", target="n1",
         change_json='{"from":"n1","to":"n2"}')
    (e,) = _entries(d.sm)
    assert (e.action, e.target, e.tenant, _change(e)) == (
        "cluster.transfer_leadership", "n1", None, {"from": "n1", "to": "n2"})
    bad = d.run(c.AuditNote, actor="admin", action="task.cancel", target="t1")
    assert bad.code == "invalid_argument" and bad.details["field"] == "action"
    assert d.run(c.AuditNote, actor="admin", action="cluster.transfer_leadership",
                 target="n1", change_json="{").code == "invalid_argument"


def test_a_big_change_is_summarised_within_its_bound() -> None:
    d = Driver()
    big = json.dumps({"blob": "x" * 10_000})
    _put(d, template=c.TaskTemplate(task_type="report", payload_json=big))
    (e,) = _entries(d.sm)
    assert len(e.change_json) <= Limits().audit_change_bytes_max
    summary = _change(e)
    assert summary["truncated"] is True and "task" in summary["fields"]
    assert summary["bytes"] > 10_000
    assert change_json({"before": None, "after": {"a": 1}}, 100) == \
        '{"after":{"a":1},"before":null}'


def test_bound_evicts_oldest_first_and_hands_them_out_once() -> None:
    d = Driver(limits=Limits(audit_entries_max=3))
    for i in range(3):
        d.ok(c.SetTenant, tenant=f"t{i}", weight=2, actor="admin")
    result = d.run(c.SetTenant, tenant="t3", weight=2, actor="admin", request_id="evicting")
    assert result.ok and [e.target for e in result.details["audit_evicted"]] == ["t0"]
    again = d.run(c.SetTenant, tenant="t3", weight=2, actor="admin", request_id="evicting")
    assert again.ok and "audit_evicted" not in again.details
    assert [e.target for e in _entries(d.sm)] == ["t3", "t2", "t1"]
    assert d.sm.audit.seq == 4 and d.sm.audit.evicted == []


def test_page_filters_cursor_since_and_scan_bound() -> None:
    d = Driver()
    for i in range(10):
        d.now = T0 + i * 1_000
        d.ok(c.SetTenant, tenant="acme" if i % 2 else "beta", weight=i + 1,
             actor="admin" if i < 5 else "root")
    page, cur = d.sm.audit_page(limit=4)
    assert [e.id for e in page] == [10, 9, 8, 7] and cur == 6
    page, cur = d.sm.audit_page(limit=4, cursor=cur)
    assert [e.id for e in page] == [6, 5, 4, 3] and cur == 2
    page, cur = d.sm.audit_page(limit=4, cursor=cur)
    assert [e.id for e in page] == [2, 1] and cur is None
    assert [e.id for e in _entries(d.sm, tenant="acme")] == [10, 8, 6, 4, 2]
    assert [e.id for e in _entries(d.sm, actor="admin", target="beta")] == [5, 3, 1]
    assert [e.id for e in _entries(d.sm, since_ms=T0 + 7_000)] == [10, 9, 8]
    assert _entries(d.sm, action="task.cancel") == []
    page, cur = d.sm.audit_page(actor="admin", scan_max=3)
    assert page == [] and cur == 7      # examined 10, 9, 8: none matched; more to read
    assert d.sm.audit_page(cursor=0) == ([], None)


def _busy(d: Driver) -> None:
    d.add("t1")
    d.ok(c.Cancel, task_id="t1", actor="tenant:acme")
    _put(d)
    d.ok(c.SetTenant, tenant="acme", weight=2, actor="admin")


def test_snapshot_round_trip_and_digest() -> None:
    d = Driver(limits=Limits(audit_entries_max=2))
    _busy(d)
    sm = d.sm
    again = StateMachine.restore(sm.snapshot(), limits=Limits(audit_entries_max=2))
    assert [(e.id, e.actor, e.change_json) for e in again.audit.entries] == \
        [(e.id, e.actor, e.change_json) for e in sm.audit.entries]
    assert again.audit.seq == sm.audit.seq == 3
    assert again.state_digest() == sm.state_digest()
    assert again.snapshot() == sm.snapshot()
    before = sm.state_digest()
    sm.audit.entries[-1].actor = "someone else"
    assert sm.state_digest() != before, "the trail is in the state digest"


def test_replicas_agree_on_the_trail() -> None:
    one, two = Driver(), Driver()
    _busy(one)
    _busy(two)
    assert one.sm.state_digest() == two.sm.state_digest()
    assert one.sm.snapshot() == two.sm.snapshot()
    plain = Driver()
    plain.add("t1")
    assert plain.sm.audit.seq == 0   # a state without entries keeps its old digest form


def test_older_snapshots_restore_with_an_empty_trail() -> None:
    import msgpack
    d = Driver()
    _busy(d)
    blob = d.sm.snapshot()
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True)
    unpacker.feed(blob)
    head = unpacker.unpack()
    rest = blob[unpacker.tell():]
    head = {k: v for k, v in head.items() if k not in ("audit", "audit_seq")}
    head["v"] = 5
    old = StateMachine.restore(msgpack.packb(head, use_bin_type=True) + rest)
    assert old.audit.seq == 0 and not old.audit.entries
    assert len(old.tasks) == len(d.sm.tasks)


def test_actor_is_left_out_of_the_bytes_when_none() -> None:
    plain = c.Cancel(request_id="r", now_ms=T0, task_id="t1")
    raw = codec.encode_batch([plain])
    assert codec.decode_batch(raw)[0] == plain
    named = c.Cancel(request_id="r", now_ms=T0, task_id="t1", actor="admin")
    assert codec.decode_batch(codec.encode_batch([named]))[0] == named
    assert len(codec.encode_batch([named])) > len(raw)
    fire = c.Fire(request_id="r", now_ms=T0, tenant="a", schedule_id="s", fire_ms=T0,
                  next_fire_ms=None, shard=3)
    assert codec.decode_batch(codec.encode_batch([fire]))[0] == fire
    both = c.Fire(request_id="r", now_ms=T0, tenant="a", schedule_id="s", fire_ms=T0,
                  next_fire_ms=None, manual=True, actor="admin")
    assert codec.decode_batch(codec.encode_batch([both]))[0] == both
