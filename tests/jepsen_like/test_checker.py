"""The checker on synthetic histories: each kind of violation is flagged, clean runs pass."""
from __future__ import annotations

import copy

import pytest

from tsched.node.scheduling.timer import FIRE_LEAD_MS

from .checker import CHECKS, check, check_diverged_reads
from .timefmt import to_rfc3339

T0_MS = 1_800_000_000_000     # server time of the first operation


class Synth:
    """Builds a history; the clock moves 10 ms per line unless told otherwise."""

    def __init__(self) -> None:
        self.entries: list[dict] = []
        self.ids = 0
        self.mono = 100.0

    def at(self, mono: float) -> "Synth":
        self.mono = mono
        return self

    def _line(self, **e) -> dict:
        self.mono += 0.01
        e.update(mono=self.mono, wall=T0_MS / 1000 + (self.mono - 100.0))
        self.entries.append(e)
        return e

    def op(self, f, kind="ok", process="p0", result=None, node="n1", **args) -> int:
        self.ids += 1
        self._line(id=self.ids, type="invoke", process=process, f=f, node=node, args=args)
        if kind is not None:
            self._line(id=self.ids, type=kind, process=process, f=f, node=node, result=result)
        return self.ids

    def wall_ms(self) -> int:
        return int(T0_MS + (self.mono - 100.0) * 1000)


def ts(offset_ms: int) -> str:
    return to_rfc3339(T0_MS + offset_ms)


def claimed(task_id, token, start, lease_end, tenant="t1"):
    return {"tasks": [{"task_id": task_id, "fencing_token": token, "tenant": tenant,
                       "started_at": ts(start), "lease_expires_at": ts(lease_end)}]}


def attempt(token, start, end, outcome):
    return {"fencing_token": token, "started_at": ts(start),
            "ended_at": ts(end) if end is not None else None, "outcome": outcome}


def task(task_id, state, attempts, tenant="t1", **more):
    return {"task_id": task_id, "state": state, "tenant": tenant, "attempts": attempts,
            "fencing_token": attempts[-1]["fencing_token"] if attempts else None, **more}


def clean_run():
    """Two tasks: one completed after a lease expiry and a re-claim, one cancelled."""
    h = Synth().at(90.0)
    h.op("set_tenant", tenant="t1", max_running=1)
    h.op("submit", result={"task_id": "a"}, idempotency_key="k1", tenant="t1")
    h.op("submit", result={"task_id": "b"}, idempotency_key="k2", tenant="t1")
    h.op("cancel", task_id="b", result={"state": "cancelled"})
    h.op("claim", process="w1", result=claimed("a", 1, 100, 3100))
    h.op("heartbeat", process="w1", task_id="a", fencing_token=1,
         result={"lease_expires_at": ts(4000), "cancel_requested": False})
    h.op("claim", process="w2", result=claimed("a", 2, 4500, 7500))
    h.op("complete", process="w1", kind="fail", task_id="a", fencing_token=1,
         result=None)
    h.op("complete", process="w2", task_id="a", fencing_token=2, result={"state": "completed"})
    h.op("complete", process="w2", task_id="a", fencing_token=2, result={"state": "completed"})
    final = {"tasks": {
        "a": task("a", "completed", [attempt(1, 100, 4400, "lease_expired"),
                                      attempt(2, 4500, 5000, "completed")]),
        "b": task("b", "cancelled", []),
    }, "digests": [{"node": "n1", "applied_seq": 9, "digest": "x"},
                   {"node": "n2", "applied_seq": 9, "digest": "x"},
                   {"node": "n3", "applied_seq": 8, "digest": "y"}], "converged": True}
    return h, final


def flagged(report) -> dict:
    return {k: v for k, v in report["checks"].items() if v}


def test_clean_history_is_valid():
    h, final = clean_run()
    report = check(h.entries, final)
    assert report["valid"], report["violations"]
    assert set(report["checks"]) == set(CHECKS)
    assert report["ops"] == 10


def test_acknowledged_submit_missing_or_stuck_is_lost():
    h, final = clean_run()
    h.op("submit", result={"task_id": "c"}, idempotency_key="k3", tenant="t1")
    h.op("submit", result={"task_id": "d"}, idempotency_key="k4", tenant="t1")
    final["tasks"]["d"] = task("d", "pending", [])
    report = check(h.entries, final)
    assert flagged(report) == {"lost": 2}


def test_unacknowledged_submit_may_vanish():
    h, final = clean_run()
    h.op("submit", kind="info", idempotency_key="k5", tenant="t1")
    h.op("submit", kind="fail", idempotency_key="k6", tenant="t1")
    h.op("submit", kind=None, idempotency_key="k7", tenant="t1")
    assert check(h.entries, final)["valid"]


def test_stale_completion_accepted():
    h, final = clean_run()
    # the zombie holding token 1 gets its completion accepted after token 2 was granted
    h.entries = [e for e in h.entries if not (e.get("f") == "complete" and e.get("type") == "fail")]
    h.op("complete", process="w1", task_id="a", fencing_token=1, result={"state": "completed"})
    report = check(h.entries, final)
    assert flagged(report) == {"stale_accepted": 1}
    assert report["violations"]["stale_accepted"][0]["newer_token"] == 2


def test_stale_heartbeat_accepted():
    h, final = clean_run()
    h.op("heartbeat", process="w1", task_id="a", fencing_token=1,
         result={"lease_expires_at": ts(4100), "cancel_requested": False})
    report = check(h.entries, final)
    assert report["checks"]["stale_accepted"] == 1


def test_fail_then_retry_is_not_stale():
    h, final = clean_run()
    h.op("submit", result={"task_id": "r"}, tenant="t3")
    h.op("claim", result=claimed("r", 5, 8000, 11000, tenant="t3"))
    h.op("fail", task_id="r", fencing_token=5, result={"state": "pending"})
    h.op("claim", result=claimed("r", 6, 9000, 12000, tenant="t3"))
    h.op("complete", task_id="r", fencing_token=6, result={"state": "completed"})
    final["tasks"]["r"] = task("r", "completed", [attempt(5, 8000, 8500, "failed"),
                                                   attempt(6, 9000, 9500, "completed")],
                               tenant="t3")
    assert check(h.entries, final)["valid"]


def test_overlapping_leases_are_a_double_lease():
    h, final = clean_run()
    final = copy.deepcopy(final)
    # token 2 starts while token 1's heartbeat-extended lease (to 4000) still runs
    final["tasks"]["a"]["attempts"][1]["started_at"] = ts(3900)
    report = check(h.entries, final)
    assert report["checks"]["double_lease"] == 1
    assert report["violations"]["double_lease"][0]["tokens"] == [1, 2]


def test_released_lease_frees_the_task_early():
    h, final = clean_run()
    final = copy.deepcopy(final)
    final["tasks"]["a"]["attempts"][0].update(ended_at=ts(1000), outcome="released")
    final["tasks"]["a"]["attempts"][1]["started_at"] = ts(1000)
    report = check(h.entries, final)
    assert report["checks"]["double_lease"] == 0


def test_tenant_cap_exceeded():
    h, final = clean_run()
    h.op("submit", result={"task_id": "e"}, tenant="t1")
    h.op("claim", result=claimed("e", 3, 4800, 7800))
    h.op("complete", task_id="e", fencing_token=3, result={"state": "completed"})
    # t1 is capped at 1, and task a's token 2 runs from 4500 to 5000
    final["tasks"]["e"] = task("e", "completed", [attempt(3, 4800, 6000, "completed")])
    report = check(h.entries, final)
    assert flagged(report) == {"cap_exceeded": 1}


def test_cap_slot_freed_at_the_same_instant_is_fine():
    h, final = clean_run()
    h.op("submit", result={"task_id": "e"}, tenant="t1")
    h.op("claim", result=claimed("e", 3, 5000, 8000))
    h.op("complete", task_id="e", fencing_token=3, result={"state": "completed"})
    final["tasks"]["e"] = task("e", "completed", [attempt(3, 5000, 6000, "completed")])
    assert check(h.entries, final)["valid"]


def test_claim_after_acknowledged_cancel():
    h, final = clean_run()
    h.op("claim", process="w3", result=claimed("b", 4, 9000, 12000))
    report = check(h.entries, final)
    assert report["checks"]["cancel_violations"] == 1


def test_concurrent_claim_and_cancel_is_allowed():
    h, final = clean_run()
    h.entries = [e for e in h.entries if not (e.get("f") == "cancel")]
    claim_id = h.op("claim", process="w3", kind=None)
    h.op("cancel", task_id="b", result={"state": "running"})
    h._line(id=claim_id, type="ok", process="w3", f="claim", node="n1",
            result=claimed("b", 4, 9000, 12000))
    final["tasks"]["b"] = task("b", "cancelled", [attempt(4, 9000, 9500, "cancelled")])
    assert check(h.entries, final)["valid"]


def test_acknowledged_cancel_must_end_cancelled_or_completed():
    h, final = clean_run()
    final["tasks"]["b"]["state"] = "dead_letter"
    assert check(h.entries, final)["checks"]["cancel_violations"] == 1


def schedule_run(fire_offsets_ms, started_delay_ms=100, faults=()):
    """A one-second schedule fired at T0+1s .. T0+10s; stopped at wall T0+12.5 s."""
    h, final = clean_run()
    h.at(100.0)
    h.op("put_schedule", tenant="t2", schedule_id="s", every_ms=1000,
         result={"next_fire_at": ts(1000)})
    for kind, start_s, end_s in faults:
        h.at(100.0 + start_s).op(kind, process="nemesis")
        h.at(100.0 + end_s).op("heal", process="nemesis")
    h.at(112.5).op("stop_schedule", tenant="t2", schedule_id="s")
    for i, off in enumerate(fire_offsets_ms):
        delay = started_delay_ms(off) if callable(started_delay_ms) else started_delay_ms
        final["tasks"][f"f{i}"] = task(f"f{i}", "completed",
                                       [attempt(100 + i, off + delay, off + delay + 5, "completed")],
                                       tenant="t2", schedule_id="s", run_at=ts(off))
    return h, final


def test_every_fire_once_is_valid():
    h, final = schedule_run([s * 1000 for s in range(1, 11)])
    report = check(h.entries, final)
    assert report["valid"], report["violations"]


def test_missing_and_duplicate_fires():
    fires = [s * 1000 for s in range(1, 11) if s != 4] + [7000]
    h, final = schedule_run(fires)
    report = check(h.entries, final)
    assert flagged(report) == {"missed_fires": 1, "duplicate_fires": 1}
    assert report["violations"]["missed_fires"][0]["fire_ms"] == T0_MS + 4000


def test_a_fire_owed_only_after_a_lagging_clock_recovers_is_not_missed_at_a_stop():
    """The leader's clock ran behind from 5 s to 7 s and the schedule stopped before its
    window (and grace) ended: the fire at 6 s was not due by the leader's clock yet."""
    fires = [s * 1000 for s in range(1, 11) if s != 6]
    h, final = schedule_run(fires, faults=[("clock", 5.0, 7.0)])
    report = check(h.entries, final)
    assert report["valid"], report["violations"]
    h, final = schedule_run(fires, faults=[("partition", 5.0, 7.0)])
    assert flagged(check(h.entries, final)) == {"missed_fires": 1}   # only a clock excuses


def test_late_start_counts_only_outside_faults():
    fires = [s * 1000 for s in range(1, 11)]
    late = lambda off: 9000 if off == 2000 else 100      # noqa: E731
    h, final = schedule_run(fires, late)
    assert check(h.entries, final)["checks"]["missed_fires"] == 1
    h, final = schedule_run(fires, late, faults=[("partition", 1.5, 2.5)])
    report = check(h.entries, final)
    assert report["valid"], report["violations"]
    assert report["nemesis"] == {"partition": 1}


def test_digest_mismatch_at_the_same_seq():
    h, final = clean_run()
    final["digests"].append({"node": "n3", "applied_seq": 9, "digest": "z"})
    report = check(h.entries, final)
    assert flagged(report) == {"digest_mismatch": 1}


def test_unconverged_cluster_is_invalid():
    h, final = clean_run()
    final["converged"] = False
    assert flagged(check(h.entries, final)) == {"unconverged": 1}


def test_unavailability_windows():
    h, final = clean_run()
    h.at(200.0).op("submit", result={"task_id": "a"}, idempotency_key="k1", tenant="t1")
    h.at(201.0).op("submit", kind="info", idempotency_key="k8", tenant="t1")
    h.at(204.0).op("submit", result={"task_id": "a"}, idempotency_key="k1", tenant="t1")
    report = check(h.entries, final)
    assert report["valid"]
    windows = report["unavailability"]["list"]
    assert any(w["duration_s"] == pytest.approx(4.0, abs=0.05) for w in windows), windows


def test_schedule_without_a_firing_timer_is_not_checked():
    h, final = schedule_run([])
    report = check(h.entries, final)
    assert report["checks"]["missed_fires"] == 10
    h._line(id=999, type="note", process="setup", f="schedule_unsupported", tenant="t2",
            schedule_id="s")
    report = check(h.entries, final)
    assert report["valid"] and report["fires_checked"] == 0


def test_retried_fire_is_placed_by_its_fire_record():
    fires = [s * 1000 for s in range(1, 11)]
    h, final = schedule_run(fires)
    # the 4 s occurrence failed once: its run_at moved to the end of its backoff
    moved = final["tasks"]["f3"]
    moved["run_at"] = ts(5_500)
    moved["attempts"] = [attempt(500, 4100, 4200, "failed"), attempt(501, 5600, 5700, "completed")]
    h.op("read_schedule", tenant="t2", schedule_id="s",
         result={"fires": [{"fire_at": ts(4000), "outcome": "ran", "task_id": "f3"}]})
    report = check(h.entries, final)
    assert report["valid"], report["violations"]


def test_fire_records_show_missed_and_duplicate_occurrences():
    fires = [s * 1000 for s in range(1, 11) if s != 6]
    h, final = schedule_run(fires)
    h.op("read_schedule", tenant="t2", schedule_id="s", result={"fires": [
        {"fire_at": ts(6000), "outcome": "missed", "task_id": None},
        {"fire_at": ts(8000), "outcome": "ran", "task_id": "f6"},
        {"fire_at": ts(8000), "outcome": "ran", "task_id": "other"},
    ]})
    report = check(h.entries, final)
    assert flagged(report) == {"missed_fires": 1, "duplicate_fires": 1}
    assert report["violations"]["missed_fires"][0]["why"] == "missed"


def test_retried_fire_without_a_record_covers_one_gap_only():
    fires = [s * 1000 for s in range(1, 11)]
    h, final = schedule_run(fires)
    for name in ("f2", "f3"):
        final["tasks"][name]["attempts"] = [attempt(600, 3100, 3200, "lease_expired"),
                                            attempt(601, 9000, 9100, "completed")]
        final["tasks"][name]["run_at"] = ts(8_000)
        final["tasks"][name]["created_at"] = ts(3_050)
    # both fires (3 s and 4 s) are uncovered; each stand-in was created after 3 s only
    report = check(h.entries, final)
    assert report["checks"]["missed_fires"] == 1, report["violations"]


def test_a_read_of_an_applied_task_that_says_not_found_is_a_diverged_read():
    def read(status, before, after, ack=10):
        return {"node": "n2", "task_id": "t1", "ack_seq": ack, "seq_before": before,
                "status": status, "seq_after": after}
    final = {"reads": [read(404, 12, 12), read(404, 9, 9), read(200, 12, 12),
                       read(404, 12, 3)]}   # behind / found / restarted in between: fine
    found = check_diverged_reads(final)
    assert found == [read(404, 12, 12)]


def test_a_retried_fire_made_ahead_of_its_time_covers_its_gap():
    fires = [s * 1000 for s in range(1, 11)]
    h, final = schedule_run(fires)
    moved = final["tasks"]["f3"]           # the 4 s occurrence, made 200 ms early by the leader
    moved["attempts"] = [attempt(600, 4100, 4200, "lease_expired"),
                         attempt(601, 9000, 9100, "completed")]
    moved["run_at"] = ts(8_500)
    moved["created_at"] = ts(4_000 - FIRE_LEAD_MS)
    report = check(h.entries, final)
    assert report["valid"], report["violations"]


def _workflow_run(child_created: int, child_start: int, parent_state: str = "completed",
                  cb_tokens=(5,), run=False):
    """A workflow: p completed at 1000, c after it (created and started as given), cb
    after both, completed with `cb_tokens`."""
    h, final = clean_run()
    h.op("submit_workflow", process="wf0", idempotency_key="wf-1",
         deps={"p": [], "c": ["p"], "cb": ["p", "c"]}, run_steps=["c"] if run else [],
         result={"workflow_id": "w1", "steps": [["p", "tp"], ["c", "tc"], ["cb", "tcb"]]})
    for token in cb_tokens:
        h.op("complete", process="wfcb", task_id="tcb", fencing_token=token,
             result={"state": "completed"})
    final["tasks"].update({
        "tp": task("tp", parent_state, [attempt(3, 500, 1000, "completed")], tenant="t3",
                   completed_at=ts(1000)),
        "tc": task("tc", "completed", [attempt(4, child_start, 1800, "completed")],
                   tenant="t3", created_at=ts(child_created), completed_at=ts(1800)),
        "tcb": task("tcb", "completed", [attempt(t, 2000 + t, 2100 + t, "completed")
                                          for t in cb_tokens], tenant="t3",
                    created_at=ts(1800), completed_at=ts(2200)),
    })
    return h, final


def test_a_workflow_whose_steps_follow_their_parents_is_valid():
    h, final = _workflow_run(1000, 1200)
    report = check(h.entries, final)
    assert report["valid"], report["violations"]
    assert report["workflows_checked"] == 1


@pytest.mark.parametrize("created, start, parent", [(900, 1200, "completed"),
                                                    (1000, 990, "completed"),
                                                    (1000, 1200, "dead_letter")])
def test_a_step_before_its_parents_finished_is_flagged(created, start, parent):
    h, final = _workflow_run(created, start, parent)
    report = check(h.entries, final)
    assert set(flagged(report)) == {"step_before_parents"}
    assert "c" in {v["step"] for v in report["violations"]["step_before_parents"]}


def test_a_run_step_may_follow_a_dead_letter():
    h, final = _workflow_run(1000, 1200, "dead_letter", run=True)
    report = check(h.entries, final)
    assert flagged(report) == {"step_before_parents": 1}   # cb is "cancel": it may not
    assert report["violations"]["step_before_parents"][0]["step"] == "cb"


def test_a_run_step_after_a_parent_replayed_later_is_valid():
    h, final = _workflow_run(1000, 1200, run=True)
    # p dead-lettered at 1000, c ran on it, then p was replayed and completed at 3000
    final["tasks"]["tp"] = task("tp", "completed", [attempt(3, 500, 1000, "failed"),
                                                    attempt(7, 2900, 3000, "completed")],
                                tenant="t3", completed_at=ts(3000))
    report = check(h.entries, final)
    assert [v["step"] for v in report["violations"].get("step_before_parents", [])] == ["cb"]
    final["tasks"]["tc"]["created_at"] = ts(900)   # before p's first attempt ended
    report = check(h.entries, final)
    assert {v["step"] for v in report["violations"]["step_before_parents"]} == {"c", "cb"}


def test_a_callback_completed_under_two_tokens_is_flagged():
    h, final = _workflow_run(1000, 1200, cb_tokens=(5, 6))
    report = check(h.entries, final)   # the second is a stale completion too
    assert flagged(report)["callback_twice"] == 1
    assert report["violations"]["callback_twice"][0]["accepted_tokens"] == [5, 6]
