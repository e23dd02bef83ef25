"""The real StateMachine against a small, obviously-correct reference model.

The reference keeps tasks in a plain list and answers every question by a linear scan,
straight from the rules of DESIGN.md section 5. Hypothesis drives both with the same
commands and checks that they agree on every result code and on which tasks each claim
returns, plus the invariants: one open attempt (live lease) per running task, strictly
increasing fencing tokens, tenant caps, snapshot round-trip, and replay of the command log.
"""
from __future__ import annotations

from fractions import Fraction

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine import commands as c

from tests.property.test_sm_listing_pages import check_listing_indexes
from tests.property.budget import examples

T0 = 1_700_000_000_000
AGING_MS = 600_000
RETRY = c.RetryPolicy(backoff="fixed", base_ms=1_000, max_ms=1_000, jitter_permille=0)
BACKOFF_MS = 1_000
TENANTS = ("a", "b", "c")
TYPES = ("x", "y")
# commands whose recorded answer is the task itself (re-read when the request repeats)
TASK_ANSWERS = (c.SubmitTask, c.Complete, c.Fail, c.Release, c.Cancel, c.Replay)


class RefTask:
    def __init__(self, task_id, tenant, task_type, priority, run_at, max_retries, timeout,
                 key, seq):
        self.id, self.tenant, self.type, self.priority = task_id, tenant, task_type, priority
        self.run_at, self.max_retries, self.timeout, self.key = run_at, max_retries, timeout, key
        self.seq, self.state, self.token, self.failures = seq, "pending", 0, 0
        self.lease = self.started = None
        self.cancel_requested = False
        self.last_outcome = None   # outcome of the attempt holding `token`


# The reference remembers every request id: the machine under test keeps them a year
# (the plan's clock moves by hours at most), so no id leaves its request table here.
MODEL_LIMITS = Limits(request_window_ms=366 * 86_400_000)


class Reference:
    """Linear scans over a list; no heaps, no indexes."""

    def __init__(self) -> None:
        self.now = 0
        self.tasks: list[RefTask] = []
        self.max_running = {}
        self.weight = {}
        self.service = {}
        self.token = 0
        self.seq = 0
        self.requests: dict[str, tuple] = {}

    def find(self, task_id):
        return next((t for t in self.tasks if t.id == task_id), None)

    def running(self, tenant):
        return sum(1 for t in self.tasks if t.tenant == tenant and t.state == "running")

    def capped(self, tenant):
        cap = self.max_running.get(tenant, 0)
        return cap > 0 and self.running(tenant) >= cap

    def submit(self, task_id, tenant, task_type, priority, run_at, max_retries, timeout, key):
        if key is not None:
            for t in self.tasks:
                if t.tenant == tenant and t.key == key:
                    return ("ok", t.id)
        if self.find(task_id):
            return ("conflict", None)
        self.seq += 1
        self.tasks.append(RefTask(task_id, tenant, task_type, priority, run_at, max_retries,
                                  timeout, key, self.seq))
        self.service.setdefault(tenant, 0)
        return ("ok", task_id)

    def eff(self, t):
        return max(0, t.priority - (self.now - t.run_at) // AGING_MS)

    def pick(self, types, tenant, prefetch):
        cands = [t for t in self.tasks if t.state == "pending" and t.type in types
                 and (tenant is None or t.tenant == tenant) and not self.capped(t.tenant)]
        due = [t for t in cands if t.run_at <= self.now]
        if due:
            best = min(self.eff(t) for t in due)
            group = [t for t in due if self.eff(t) == best]
            return min(group, key=lambda t: (
                Fraction(self.service[t.tenant], self.weight.get(t.tenant, 1)),
                t.priority * AGING_MS + t.run_at, t.run_at, t.seq))
        soon = [t for t in cands if t.run_at <= self.now + prefetch]
        return min(soon, key=lambda t: (t.run_at, t.seq)) if soon else None

    def claim(self, types, max_tasks, lease_ms, prefetch, tenant):
        got = []
        for _ in range(max_tasks):
            t = self.pick(types, tenant, prefetch)
            if t is None:
                break
            self.token += 1
            t.state, t.token, t.last_outcome = "running", self.token, None
            t.started = max(self.now, t.run_at)
            t.lease = t.started + lease_ms
            self.service[t.tenant] += 1
            got.append(t.id)
        return ("ok", tuple(got))

    def end_failed(self, t, retryable=True):
        t.lease = None
        if t.cancel_requested:
            t.state = "cancelled"
            return
        t.failures += 1
        if retryable and t.failures <= t.max_retries:
            t.state, t.run_at = "pending", self.now + BACKOFF_MS
        else:
            t.state = "dead_letter"

    def heartbeat(self, task_id, token, lease_ms):
        t = self.find(task_id)
        if t is None:
            return ("not_found", None)
        if t.state == "running" and token == t.token:
            if not t.cancel_requested:
                t.lease = min(self.now + lease_ms, t.started + t.timeout)
            return ("ok", (t.lease, t.cancel_requested))
        if t.state != "running" and not 0 < token <= t.token:
            return ("invalid_state", None)
        return ("stale_token", None)

    def complete(self, task_id, token):
        t = self.find(task_id)
        if t is None:
            return ("not_found", None)
        if t.state == "running" and token == t.token:
            t.state, t.lease, t.last_outcome = "completed", None, "completed"
            return ("ok", t.id)
        if t.state == "completed" and token == t.token:
            return ("ok", t.id)
        return ("stale_token", None)

    def fail(self, task_id, token, retryable):
        t = self.find(task_id)
        if t is None:
            return ("not_found", None)
        if t.state == "running" and token == t.token:
            t.last_outcome = "failed"
            self.end_failed(t, retryable)
            return ("ok", t.id)
        if t.state != "running" and token == t.token and t.last_outcome == "failed":
            return ("ok", t.id)
        return ("stale_token", None)

    def release(self, task_id, token):
        t = self.find(task_id)
        if t is None:
            return ("not_found", None)
        if t.state == "running" and token == t.token:
            t.last_outcome, t.lease = "released", None
            t.state = "cancelled" if t.cancel_requested else "pending"
            return ("ok", t.id)
        if t.state != "running" and token == t.token and t.last_outcome == "released":
            return ("ok", t.id)
        return ("stale_token", None)

    def cancel(self, task_id):
        t = self.find(task_id)
        if t is None:
            return ("not_found", None)
        if t.state == "pending":
            t.state = "cancelled"
        elif t.state == "running":
            t.cancel_requested = True
        else:
            return ("invalid_state", None)
        return ("ok", t.id)

    def replay(self, task_id):
        t = self.find(task_id)
        if t is None:
            return ("not_found", None)
        if t.state != "dead_letter":
            return ("invalid_state", None)
        t.state, t.run_at, t.failures, t.cancel_requested = "pending", self.now, 0, False
        return ("ok", t.id)

    def discard(self, task_id):
        t = self.find(task_id)
        if t is None:
            return ("not_found", None)
        if t.state != "dead_letter":
            return ("invalid_state", None)
        t.state = "discarded"      # kept for audit until retention (DESIGN 14.1)
        return ("ok", t.id)

    def set_tenant(self, tenant, max_running, weight):
        self.max_running[tenant] = max_running
        self.weight[tenant] = weight
        self.service.setdefault(tenant, 0)
        return ("ok", tenant)

    def tick(self):
        for t in self.tasks:
            if t.state == "running" and min(t.lease, t.started + t.timeout) <= self.now:
                t.last_outcome = "expired"
                self.end_failed(t)
        return ("ok", None)



def pick_task(self, data, prefer: str | None = None) -> str:
    """Mostly a task the reference knows (often one in state `prefer`), sometimes none."""
    preferred = sorted(t.id for t in self.ref.tasks if t.state == prefer)
    known = sorted(t.id for t in self.ref.tasks)
    choices = (preferred * 3 + known) or ["t-none"]
    return data.draw(st.sampled_from(choices + ["t-none"]))


class SchedulerModel(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.sm = StateMachine(MODEL_LIMITS)
        self.ref = Reference()
        self.ref.now = T0
        self.now = T0
        self.log: list = []          # (command, code) in apply order
        self.max_token = 0
        self.n = 0
        self.ids = 0

    # --- plumbing ---------------------------------------------------------------------------
    def apply(self, cmd, expected, compare=None):
        result = self.sm.apply_batch([cmd])[0]
        self.log.append(cmd)
        self.ref.requests[cmd.request_id] = expected
        assert result.code == expected[0], (cmd, result, expected)
        event(f"{type(cmd).__name__}: {result.code}")
        if isinstance(cmd, c.Claim) and result.ok:
            event(f"Claim: {min(len(result.value['tasks']), 2)}+ tasks")
        if compare is not None and result.ok:
            compare(result.value, expected[1])
        return result

    def new_cmd(self, cls, **fields):
        self.n += 1
        return cls(request_id=f"r{self.n}", now_ms=self.now, **fields)

    def token_for(self, task_id, which):
        t = self.ref.find(task_id)
        cur = t.token if t else 0
        return {"current": cur, "old": max(0, cur - 1), "future": cur + 1}[which]

    # --- rules ------------------------------------------------------------------------------
    @rule(reuse=st.integers(0, 9), tenant=st.sampled_from(TENANTS), task_type=st.sampled_from(TYPES),
          priority=st.sampled_from([0, 5, 5, 5, 10]), delay=st.sampled_from([-1_300_000, -700_000, 0, 0, 300,
                                                               5_000]),
          max_retries=st.integers(0, 2), timeout=st.sampled_from([5_000, 60_000]),
          key=st.none() | st.sampled_from(["k1", "k2"]))
    def submit(self, reuse, tenant, task_type, priority, delay, max_retries, timeout, key):
        self.ids += 1
        task_id = f"t{self.ids - 1 if reuse == 0 and self.ids > 1 else self.ids}"  # some conflict
        run_at = self.now + delay
        cmd = self.new_cmd(c.SubmitTask, task_id=task_id, tenant=tenant, task_type=task_type,
                           priority=priority, run_at_ms=run_at, max_retries=max_retries,
                           retry=RETRY, timeout_ms=timeout, idempotency_key=key)
        expected = self.ref.submit(task_id, tenant, task_type, priority, run_at, max_retries,
                                   timeout, key)
        self.apply(cmd, expected, lambda v, tid: self._same(v["task"].task_id, tid))

    @rule(priority=st.sampled_from([0, 5]), task_type=st.sampled_from(TYPES),
          tenants=st.permutations(TENANTS))
    def submit_burst(self, priority, task_type, tenants):
        """One due task per tenant at one priority: claims must then share fairly."""
        for tenant in tenants:
            self.submit(reuse=1, tenant=tenant, task_type=task_type, priority=priority,
                        delay=0, max_retries=1, timeout=60_000, key=None)

    @rule(types=st.sets(st.sampled_from(TYPES), min_size=1).map(sorted),
          max_tasks=st.integers(1, 3), lease_ms=st.sampled_from([1_000, 4_000, 30_000]),
          prefetch=st.sampled_from([0, 0, 500]), tenant=st.none() | st.sampled_from(TENANTS))
    def claim(self, types, max_tasks, lease_ms, prefetch, tenant):
        cmd = self.new_cmd(c.Claim, worker_id="w", task_types=tuple(types),
                           max_tasks=max_tasks, lease_ms=lease_ms, prefetch_ms=prefetch,
                           tenant=tenant)
        expected = self.ref.claim(types, max_tasks, lease_ms, prefetch, tenant)
        result = self.apply(cmd, expected,
                            lambda v, ids: self._same(tuple(t.task_id for t in v["tasks"]), ids))
        for task in result.value["tasks"]:
            assert task.fencing_token > self.max_token      # strictly increasing
            self.max_token = task.fencing_token
            view = self.sm.get_tenant(task.tenant)
            assert view.max_running == 0 or view.running <= view.max_running

    @rule(data=st.data(), which=st.sampled_from(["current", "current", "old", "future"]),
          lease_ms=st.sampled_from([1_000, 10_000]))
    def heartbeat(self, data, which, lease_ms):
        task_id = pick_task(self, data, "running")
        token = self.token_for(task_id, which)
        cmd = self.new_cmd(c.Heartbeat, task_id=task_id, fencing_token=token, lease_ms=lease_ms)
        self.apply(cmd, self.ref.heartbeat(task_id, token, lease_ms),
                   lambda v, exp: self._same((v["lease_expires_at_ms"], v["cancel_requested"]),
                                             exp))

    @rule(data=st.data(), which=st.sampled_from(["current", "current", "current", "old"]),
          outcome=st.sampled_from(["complete", "fail", "fail", "fail_final", "release"]))
    def report(self, data, which, outcome):
        task_id = pick_task(self, data, "running")
        token = self.token_for(task_id, which)
        if outcome == "complete":
            cmd = self.new_cmd(c.Complete, task_id=task_id, fencing_token=token)
            expected = self.ref.complete(task_id, token)
        elif outcome == "release":
            cmd = self.new_cmd(c.Release, task_id=task_id, fencing_token=token)
            expected = self.ref.release(task_id, token)
        else:
            retryable = outcome == "fail"
            cmd = self.new_cmd(c.Fail, task_id=task_id, fencing_token=token, error="e",
                               retryable=retryable)
            expected = self.ref.fail(task_id, token, retryable)
        self.apply(cmd, expected)

    @rule(data=st.data(), action=st.sampled_from(["cancel", "replay", "discard"]))
    def manage(self, data, action):
        task_id = pick_task(self, data, "dead_letter" if action != "cancel" else None)
        cls = {"cancel": c.Cancel, "replay": c.Replay, "discard": c.Discard}[action]
        self.apply(self.new_cmd(cls, task_id=task_id), getattr(self.ref, action)(task_id))

    @rule(tenant=st.sampled_from(TENANTS), max_running=st.integers(0, 2),
          weight=st.integers(1, 3))
    def set_tenant(self, tenant, max_running, weight):
        cmd = self.new_cmd(c.SetTenant, tenant=tenant, max_running=max_running, weight=weight)
        self.apply(cmd, self.ref.set_tenant(tenant, max_running, weight))

    @rule(ms=st.sampled_from([1, 250, 1_000, 3_000, 20_000, 700_000]))
    def tick(self, ms):
        self.now += ms
        self.ref.now = self.now
        self.apply(self.new_cmd(c.Tick), self.ref.tick())

    @rule(data=st.data())
    def repeat_request(self, data):
        cmd = data.draw(st.sampled_from([m for m in self.log if not isinstance(m, c.Tick)]
                                        or [None]))
        if cmd is None:
            return
        expected = self.ref.requests[cmd.request_id]
        if (expected[0] == "ok" and isinstance(cmd, TASK_ANSWERS)
                and self.ref.find(expected[1]) is None):
            expected = ("not_found", None)   # the recorded answer names a task now gone
        self.apply(cmd, expected)

    @rule()
    def replay_log(self):
        fresh = StateMachine(MODEL_LIMITS)
        for cmd in self.log:
            fresh.apply_batch([cmd])
        assert fresh.digest() == self.sm.digest()

    # --- invariants ---------------------------------------------------------------------------
    @staticmethod
    def _same(got, expected):
        assert got == expected, (got, expected)

    @invariant()
    def states_agree(self):
        if not hasattr(self, "sm"):
            return
        real = {tid: t.state for tid, t in self.sm.tasks.items()}
        assert real == {t.id: t.state for t in self.ref.tasks}

    @invariant()
    def one_live_lease_per_task(self):
        if not hasattr(self, "sm"):
            return
        for task in self.sm.tasks.values():
            open_attempts = [a for a in task.attempts if a.outcome is None]
            if task.state == "running":
                assert len(open_attempts) == 1
                assert open_attempts[0].fencing_token == task.fencing_token
                assert task.lease_expires_at_ms is not None
            else:
                assert open_attempts == [] and task.lease_expires_at_ms is None

    @invariant()
    def snapshot_round_trip(self):
        if not hasattr(self, "sm"):
            return
        twin = StateMachine.restore(self.sm.snapshot(), MODEL_LIMITS)
        # the listings by task type and by schedule, kept on every transition and rebuilt
        # from the snapshot's tasks, hold exactly each key's tasks
        check_listing_indexes(self.sm)
        check_listing_indexes(twin)
        assert twin.digest() == self.sm.digest()
        assert twin.state_digest() == self.sm.state_digest()
        assert twin.next_timer_ms() == self.sm.next_timer_ms()
        for types in (("x",), ("x", "y")):
            assert twin.next_due_ms(types) == self.sm.next_due_ms(types)
            assert twin.has_claimable(types, None, 500, self.now) == \
                self.sm.has_claimable(types, None, 500, self.now)

    def teardown(self):
        if hasattr(self, "sm"):
            self.replay_log()


SchedulerModel.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_scheduler_model = SchedulerModel.TestCase
