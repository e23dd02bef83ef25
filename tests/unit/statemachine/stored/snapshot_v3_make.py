"""Writes `snapshot_v3_3483ebd.bin` and `.json`: a small state in snapshot format 3, made by
the state machine as of commit 3483ebd (before the lifecycle table and the store), and the
digest the same code reached after applying `continuation()` to it.

The test (`test_sm_stored_snapshot.py`) restores the stored bytes with today's code and
applies the same continuation: equal digests and result codes mean the old snapshot still
restores to the very state the old code had. Regenerate only on purpose (a new format):

    .venv/bin/python tests/unit/statemachine/stored/snapshot_v3_make.py
"""
from __future__ import annotations

import json
import pathlib

from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c

T0 = 1_700_000_000_000
HERE = pathlib.Path(__file__).parent
NAME = "snapshot_v3_3483ebd"


class _Run:
    def __init__(self) -> None:
        self.sm = StateMachine()
        self.n = 0
        self.now = T0

    def __call__(self, cls, **fields):
        self.n += 1
        fields.setdefault("request_id", f"r{self.n}")
        fields.setdefault("now_ms", self.now)
        return self.sm.apply_batch([cls(**fields)])[0]


def build() -> StateMachine:
    """Tasks in every state (with attempts, idempotency keys, a schedule's occurrences),
    tenants with settings, a paused and an active schedule, a deleted schedule and a
    discarded task in the request table, and rejections recorded there too."""
    run = _Run()
    run(c.SetTenant, tenant="acme", max_running=5, weight=3)
    run(c.PutSchedule, tenant="acme", schedule_id="nightly", cron="0 3 * * *",
        template=c.TaskTemplate(task_type="report"), next_fire_ms=T0 + 60_000)
    run(c.PutSchedule, tenant="beta", schedule_id="gone", cron="* * * * *",
        template=c.TaskTemplate(task_type="email"), next_fire_ms=T0 + 60_000)
    run(c.PutSchedule, tenant="beta", schedule_id="held", cron="*/5 * * * *",
        template=c.TaskTemplate(task_type="email"), next_fire_ms=T0 + 300_000)
    run(c.PauseSchedule, tenant="beta", schedule_id="held")
    run(c.DeleteSchedule, tenant="beta", schedule_id="gone")
    fast = c.RetryPolicy(backoff="fixed", base_ms=1_000, max_ms=1_000, jitter_permille=0)
    for i in range(24):
        run(c.SubmitTask, task_id=f"t{i}", tenant=("acme", "beta")[i % 2],
            task_type=("email", "sms")[i % 3 == 0], priority=i % 11,
            payload_json=f'{{"n":{i}}}', max_retries=i % 3,
            run_at_ms=T0 + 3_600_000 if i % 8 == 7 else None,
            idempotency_key=f"k{i}" if i % 5 == 0 else None,
            retry=fast if i % 2 else c.RetryPolicy())
    run(c.SubmitTask, task_id="t0-again", tenant="acme", task_type="email",
        idempotency_key="k0")                                  # duplicate
    run(c.SubmitTask, task_id="big", tenant="acme", task_type="email", priority=99)  # 400
    run.now = T0 + 1_000
    got = run(c.Claim, worker_id="w1", task_types=("email", "sms"), max_tasks=16,
              lease_ms=30_000).value["tasks"]
    tokens = {t.task_id: t.fencing_token for t in got}
    ids = sorted(tokens)
    for k, tid in enumerate(ids[:12]):
        tok = tokens[tid]
        if k % 6 == 0:
            run(c.Complete, task_id=tid, fencing_token=tok, result_json='{"ok":1}')
        elif k % 6 == 1:
            run(c.Fail, task_id=tid, fencing_token=tok, error="boom", retryable=True)
        elif k % 6 == 2:
            run(c.Fail, task_id=tid, fencing_token=tok, error="fatal", retryable=False)
        elif k % 6 == 3:
            run(c.Cancel, task_id=tid)
            run(c.Release, task_id=tid, fencing_token=tok)
        elif k % 6 == 4:
            run(c.Release, task_id=tid, fencing_token=tok)
        else:
            run(c.Heartbeat, task_id=tid, fencing_token=tok, lease_ms=60_000)
    run(c.Complete, task_id=ids[0], fencing_token=tokens[ids[0]] + 1000)   # stale
    run(c.Cancel, task_id="t4")
    dead = [t.task_id for t in run.sm.tasks.values() if t.state == "dead_letter"]
    run(c.Replay, task_id=dead[0])
    run(c.Discard, task_id=dead[-1])
    run.now = T0 + 60_000
    run(c.Fire, tenant="acme", schedule_id="nightly", fire_ms=T0 + 60_000,
        next_fire_ms=T0 + 120_000)
    run(c.Fire, tenant="acme", schedule_id="nightly", fire_ms=T0 + 50_000, manual=True,
        next_fire_ms=None)
    run.now = T0 + 40_000
    run(c.Tick)                                                # a lease expires
    return run.sm


def continuation() -> list:
    """Commands applied after the restore: every kind of change to the restored records."""
    now = T0 + 2 * 3_600_000
    return [
        c.Tick(request_id="x-tick", now_ms=now),
        c.Claim(request_id="x-claim", now_ms=now, worker_id="w2",
                task_types=("email", "sms", "report"), max_tasks=50, lease_ms=60_000),
        c.SubmitTask(request_id="x-sub", now_ms=now, task_id="after", tenant="gamma",
                     task_type="email"),
        c.SubmitTask(request_id="x-dup", now_ms=now, task_id="after2", tenant="beta",
                     task_type="email", idempotency_key="k5"),
        c.SetTenant(request_id="x-ten", now_ms=now, tenant="beta", weight=7),
        c.ResumeSchedule(request_id="x-res", now_ms=now, tenant="beta", schedule_id="held",
                         next_fire_ms=now + 300_000),
        c.Cancel(request_id="x-can", now_ms=now, task_id="t1"),
        c.Tick(request_id="x-tick2", now_ms=now + 8 * 86_400_000),   # retention evicts
    ]


def main() -> None:
    sm = build()
    blob = sm.snapshot()
    before = sm.digest()
    codes = [r.code for r in sm.apply_batch(continuation())]
    (HERE / f"{NAME}.bin").write_bytes(blob)
    (HERE / f"{NAME}.json").write_text(json.dumps({
        "digest": before, "seq": sm.seq - 1, "tasks": len(StateMachine.restore(blob).tasks),
        "continuation_codes": codes, "digest_after": sm.digest(),
        "tasks_after": len(sm.tasks)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
