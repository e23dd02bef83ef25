"""Re-partitioning a backup's state over another shard count (statemachine/reshard.py,
DESIGN.md section 6.1): every record lands once, on its tenant's shard, in equal bytes."""
from __future__ import annotations

import pytest

from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c
from tsched.statemachine.errors import DecodeError
from tsched.statemachine.graphs import compact
from tsched.statemachine.reshard import reshard

from sm_support import T0, Driver

TENANTS = ("acme", "beta", "gamma", "delta", "omega")
TEMPLATE = c.TaskTemplate(task_type="report")


def _shard_of(shards: int):
    return lambda tenant: TENANTS.index(tenant) % shards if tenant in TENANTS else 0


def _old_shard(prefix: str, tenants, n: int = 4) -> StateMachine:
    d = Driver()
    for tenant in tenants:
        d.ok(c.SetTenant, tenant=tenant, max_running=5, weight=2, actor="admin")
        d.ok(c.PutSchedule, tenant=tenant, schedule_id="nightly", cron="0 3 * * *",
             template=TEMPLATE, next_fire_ms=T0 + 60_000, actor="admin")
        for i in range(n):
            d.add(f"{prefix}-{tenant}-{i}", tenant=tenant, idempotency_key=f"k-{i}")
        d.advance(1_000)
    d.claim_one(task_types=("email",), max_tasks=1)
    d.now = T0 + 60_000
    d.ok(c.Fire, tenant=tenants[0], schedule_id="nightly", fire_ms=T0 + 60_000,
         next_fire_ms=T0 + 120_000, actor="admin")
    return d.sm


def _olds() -> list[bytes]:
    return [_old_shard("a", ("acme", "beta", "gamma")).snapshot(),
            _old_shard("b", ("delta", "omega")).snapshot()]


@pytest.mark.parametrize("shards", [1, 3])
def test_every_record_lands_once_on_its_tenants_shard(shards: int) -> None:
    olds = [StateMachine.restore(b) for b in _olds()]
    news = [StateMachine.restore(b) for b in reshard(_olds(), shards, _shard_of(shards))]
    assert len(news) == shards
    shard_of = _shard_of(shards)
    want_tasks = {tid: t for o in olds for tid, t in o.tasks.items()}
    got = [tid for n in news for tid in n.tasks]
    assert sorted(got) == sorted(want_tasks)
    for s, new in enumerate(news):
        assert all(shard_of(t.tenant) == s for t in new.tasks.values())
        assert all(shard_of(k[0]) == s for k in new.schedules)
        assert all(shard_of(name) == s for name in new.tenants)
        assert [t.seq for t in new.store.all.oldest_first()] == list(range(1, len(new.tasks) + 1))
        assert new.task_seq == len(new.tasks)
        assert new.cluster_token == max(o.cluster_token for o in olds)
        assert new.seq == max(o.seq for o in olds) and not new.requests
        for tid, t in new.tasks.items():
            old = want_tasks[tid]
            assert (t.state, t.tenant, t.idempotency_key, t.fencing_token, len(t.attempts)) \
                == (old.state, old.tenant, old.idempotency_key, old.fencing_token,
                    len(old.attempts))
            if t.idempotency_key is not None:
                assert new.store.idem[(t.tenant, t.idempotency_key)] is t
    scheds = {k: s for n in news for k, s in n.schedules.items()}
    assert sorted(scheds) == sorted(k for o in olds for k in o.schedules)
    for o in olds:
        for k, sched in o.schedules.items():
            assert [(f.fire_ms, f.outcome, f.task_id) for f in scheds[k].fires] == \
                [(f.fire_ms, f.outcome, f.task_id) for f in sched.fires]
    tenants = {name: v for n in news for name, v in n.tenants.items()}
    assert sorted(tenants) == sorted(TENANTS)
    assert all((v.max_running, v.weight) == (5, 2) for v in tenants.values())
    audit = [e.target for n in news for e in n.audit.entries]
    assert sorted(audit) == sorted(e.target for o in olds for e in o.audit.entries)
    for n in news:
        assert [e.id for e in n.audit.entries] == list(range(1, len(n.audit.entries) + 1))


def test_bytes_are_deterministic_and_a_new_shard_applies_commands() -> None:
    first = reshard(_olds(), 3, _shard_of(3))
    assert first == reshard(_olds(), 3, _shard_of(3))
    assert len(set(first)) == 3
    sm = StateMachine.restore(first[0])
    assert sm.snapshot() == first[0]
    before = sm.task_seq
    r = sm.apply(c.SubmitTask(request_id="after-1", now_ms=T0 + 200_000, task_id="new-1",
                              tenant="acme", task_type="email"))
    assert r.ok and sm.tasks["new-1"].seq == before + 1
    dup = sm.apply(c.SubmitTask(request_id="after-2", now_ms=T0 + 200_000, task_id="new-2",
                                tenant="acme", task_type="email", idempotency_key="k-0"))
    assert dup.ok and dup.value["task"].task_id == "a-acme-0"


def test_a_task_id_in_two_old_shards_is_refused() -> None:
    twin = _old_shard("a", ("delta",), n=1).snapshot()
    with pytest.raises(DecodeError):
        reshard([_old_shard("a", ("acme",), n=1).snapshot(), twin,
                 _old_shard("a", ("delta",), n=1).snapshot()], 2, _shard_of(2))


def test_workflows_go_to_their_tenants_shard_and_keep_resolving() -> None:
    rows = tuple((n, f"{n}-task", "wf", "null", 5, 60_000, 0, ("fixed", 1, 1, 1_000, 0),
                  deps, "cancel") for n, deps in (("a", ()), ("b", (0,))))
    olds = []
    for tenant in ("acme", "delta"):
        d = Driver()
        step_rows = tuple((r[0], f"{tenant}-{r[1]}", *r[2:]) for r in rows)
        d.ok(c.SubmitWorkflow, workflow_id=f"w-{tenant}", tenant=tenant, **compact(step_rows))
        olds.append(d.sm.snapshot())
    news = [StateMachine.restore(b) for b in reshard(olds, 2, _shard_of(2))]
    assert [list(sm.workflows.by_id) for sm in news] == [["w-acme"], ["w-delta"]]
    sm = news[0]
    assert [s.state for s in sm.workflows.by_id["w-acme"].steps] == ["pending", "waiting"]
    task = sm.tasks["acme-a-task"]
    assert sm.apply(c.Claim(request_id="c", now_ms=T0 + 1, worker_id="w",
                            task_types=("wf",))).ok
    assert sm.apply(c.Complete(request_id="k", now_ms=T0 + 1, task_id=task.task_id,
                               fencing_token=task.fencing_token)).ok
    assert sm.tasks["acme-b-task"].state == "pending"
