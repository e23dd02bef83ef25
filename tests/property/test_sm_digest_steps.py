"""Random command sequences over every command type, with limits small enough that
request-table and retention evictions, attempt and fire trimming happen: a twin restored
from a snapshot at any step and driven on with the same batches gives the same answers and
keeps the same rolling and state digests; and the state digest of the end state is the
one its snapshot carries."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import codec
from tsched.statemachine import commands as c
from tests.property.budget import examples

T0 = 1_700_000_000_000
# A request table of 10 ids kept 5 s: the plan's steps both fill it and let it expire
SMALL = Limits(requests_max=10, request_window_ms=4_000, request_ahead_ms_max=1_000,
               terminal_tasks_max=3, attempts_kept_max=2, fires_kept=2,
               retention_ms=30_000, evictions_per_tick_max=2, live_tasks_max=12)
TASKS = ("t1", "t2", "t3", "t4")
TENANTS = ("a", "b")
SCHEDULES = ("s1", "s2")

RUNNING = "<running>"   # a task id resolved at run time to a running task, if any
task_ids = st.sampled_from(TASKS)
target_ids = st.sampled_from(TASKS + (RUNNING, RUNNING, RUNNING))
tenants = st.sampled_from(TENANTS)
schedules = st.sampled_from(SCHEDULES)
CURRENT = -1   # a fencing token resolved at run time to the task's current one
tokens = st.sampled_from([CURRENT, CURRENT, CURRENT, 0, 1, 2])
steps = st.sampled_from([0, 0, 1_000, 5_000, 40_000])
template = c.TaskTemplate(task_type="x", max_retries=1)

commands = st.one_of(
    st.builds(lambda **f: ("SubmitTask", f), task_id=task_ids, tenant=tenants,
              task_type=st.just("x"), max_retries=st.integers(0, 1),
              idempotency_key=st.none() | st.just("k"),
              retry=st.just(c.RetryPolicy(backoff="fixed", base_ms=1_000, jitter_permille=0))),
    st.builds(lambda **f: ("Claim", f), worker_id=st.just("w"), task_types=st.just(("x",)),
              max_tasks=st.integers(1, 3), lease_ms=st.sampled_from([1_000, 20_000])),
    st.builds(lambda **f: ("Heartbeat", f), task_id=target_ids, fencing_token=tokens),
    st.builds(lambda **f: ("Complete", f), task_id=target_ids, fencing_token=tokens),
    st.builds(lambda **f: ("Fail", f), task_id=target_ids, fencing_token=tokens,
              error=st.just("e"), retryable=st.booleans()),
    st.builds(lambda **f: ("Release", f), task_id=target_ids, fencing_token=tokens),
    st.builds(lambda **f: ("Cancel", f), task_id=target_ids),
    st.builds(lambda **f: ("Replay", f), task_id=task_ids),
    st.builds(lambda **f: ("Discard", f), task_id=task_ids),
    st.builds(lambda **f: ("SetTenant", f), tenant=tenants, max_running=st.integers(0, 2),
              weight=st.integers(1, 3)),
    st.builds(lambda **f: ("PutSchedule", f), tenant=tenants, schedule_id=schedules,
              cron=st.sampled_from(["* * * * *", "@hourly"]), template=st.just(template),
              overlap=st.sampled_from(["allow", "skip", "buffer_one"]),
              next_fire_ms=st.integers(T0, T0 + 200_000)),
    st.builds(lambda **f: ("DeleteSchedule", f), tenant=tenants, schedule_id=schedules),
    st.builds(lambda **f: ("PauseSchedule", f), tenant=tenants, schedule_id=schedules),
    st.builds(lambda **f: ("ResumeSchedule", f), tenant=tenants, schedule_id=schedules,
              next_fire_ms=st.integers(T0, T0 + 200_000)),
    st.builds(lambda **f: ("Fire", f), tenant=tenants, schedule_id=schedules,
              fire_ms=st.integers(T0, T0 + 200_000), next_fire_ms=st.integers(T0, T0 + 300_000),
              manual=st.booleans()),
    st.builds(lambda **f: ("Tick", f)),
    st.builds(lambda **f: ("Barrier", f)),
)
# A step: (command, clock advance, request id reuse: None = fresh, n = repeat request n)
plans = st.lists(st.tuples(commands, steps, st.none() | st.integers(0, 20)),
                 min_size=5, max_size=40)


def _command(sm: StateMachine, kind: str, fields: dict, rid: str, now_ms: int) -> c.Command:
    if fields.get("task_id") == RUNNING:
        running = [t.task_id for t in sm.tasks.values() if t.state == "running"]
        fields = dict(fields, task_id=running[0] if running else TASKS[0])
    if fields.get("fencing_token") == CURRENT:
        task = sm.tasks.get(fields["task_id"])
        fields = dict(fields, fencing_token=task.fencing_token if task else 0)
    return getattr(c, kind)(request_id=rid, now_ms=now_ms, **fields)


def _seeded() -> StateMachine:
    """Tasks in every state the plan can then act on, two schedules, a capped tenant."""
    sm = StateMachine(limits=SMALL)
    seed = [c.SetTenant(request_id="s0", now_ms=T0, tenant="b", max_running=2, weight=2)]
    seed += [c.SubmitTask(request_id=f"s{i}", now_ms=T0, task_id=task_id, task_type="x",
                          tenant=TENANTS[i % 2], max_retries=1)
             for i, task_id in enumerate(TASKS, start=1)]
    seed += [c.PutSchedule(request_id=f"p{i}", now_ms=T0, tenant=TENANTS[i],
                           schedule_id=sid, cron="* * * * *", template=template,
                           next_fire_ms=T0 + 60_000) for i, sid in enumerate(SCHEDULES)]
    seed += [c.Claim(request_id="c", now_ms=T0, worker_id="w", task_types=("x",),
                     max_tasks=2, lease_ms=20_000)]
    assert all(r.ok for r in sm.apply_batch(seed))
    return sm


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans, st.integers(0, 39))
def test_a_restored_twin_keeps_both_digests_after_every_step(plan, fork_at) -> None:
    sm, twin = _seeded(), None
    now = T0
    for i, ((kind, fields), step, reuse) in enumerate(plan):
        now += step
        rid = f"r{reuse if reuse is not None and reuse < i else i}"
        cmd = _command(sm, kind, fields, rid, now)
        blob = codec.encode_batch([cmd])
        result = sm.apply_batch(codec.decode_batch(blob))[0]
        if twin is not None:
            assert twin.apply_batch(codec.decode_batch(blob))[0].code == result.code
            assert twin.digest() == sm.digest(), (i, cmd)
            assert twin.state_digest() == sm.state_digest(), (i, cmd)
        if i == fork_at:
            twin = StateMachine.restore(sm.snapshot(), limits=SMALL)
            assert twin.digest() == sm.digest()
            assert twin.state_digest() == sm.state_digest()
    final = StateMachine.restore(sm.snapshot(), limits=SMALL)
    assert final.digest() == sm.digest() and final.state_digest() == sm.state_digest()
