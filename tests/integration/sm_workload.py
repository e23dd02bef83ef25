"""A seeded workload through the state machine, printed as one JSON line: which build ran
(compiled or Python), the digests, and a hash of every answer as the API renders it.
`test_compiled_build.py` runs it once per build: replicas of either build must agree.

    python -m tests.integration.sm_workload --seed 3 --steps 4000
"""
from __future__ import annotations

import argparse
import hashlib
import random
import sys

import orjson

from tsched.node.present import result as present
from tsched.statemachine import StateMachine
from tsched.statemachine import commands as c

T0 = 1_800_000_000_000
TYPES = ("email", "sms", "report")


class Workload:
    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.sm = StateMachine()
        self.now = T0
        self.n = 0
        self.leased: list[tuple[str, int]] = []
        self.answers = hashlib.sha256()

    def apply(self, cls, **fields) -> None:
        self.n += 1
        cmds = [cls(request_id=f"r{self.n}", now_ms=self.now, **fields)]
        if self.rnd.random() < 0.1:   # now and then the same request again
            cmds.append(cmds[0])
        for cmd, res in zip(cmds, self.sm.apply_batch(cmds)):
            rendered = present(cmd, res)
            self.answers.update(orjson.dumps(getattr(rendered, "__dict__", rendered),
                                             default=repr, option=orjson.OPT_SORT_KEYS))
            if isinstance(cmd, c.Claim) and res.ok:
                self.leased += [(t.task_id, t.fencing_token) for t in res.value["tasks"]]

    def step(self) -> None:
        r, rnd = self.rnd.random(), self.rnd
        self.now += rnd.randrange(0, 300)
        if r < 0.35:
            self.apply(c.SubmitTask, task_id=f"t{self.n}", tenant=f"ten{rnd.randrange(4)}",
                       task_type=rnd.choice(TYPES), payload_json='{"n":%d}' % self.n,
                       priority=rnd.randrange(10),
                       run_at_ms=self.now + rnd.randrange(-5, 60) * 1000,
                       max_retries=rnd.randrange(3), timeout_ms=rnd.choice((5_000, 60_000)),
                       idempotency_key=rnd.choice((None, f"k{rnd.randrange(50)}")))
        elif r < 0.5:
            self.apply(c.Claim, worker_id=f"w{rnd.randrange(3)}",
                       task_types=TYPES[:rnd.randrange(1, 4)], max_tasks=rnd.randrange(1, 20),
                       lease_ms=rnd.choice((5_000, 60_000)))
        elif r < 0.55:   # weighted polling by tier (DESIGN 5.1)
            weights = tuple((lo, hi, rnd.randrange(1, 1001)) for lo, hi in
                            ((0, 0), (1, 3), (4, 6), (7, 9)) if rnd.random() < 0.7)
            self.apply(c.Claim, worker_id=f"w{rnd.randrange(3)}", task_types=TYPES[:2],
                       max_tasks=rnd.randrange(1, 20), tier_weights=weights)
        elif r < 0.8 and self.leased:
            newest = len(self.leased)   # mostly recent leases: older ones have expired
            task_id, token = self.leased.pop(rnd.randrange(max(0, newest - 8), newest))
            kind = rnd.random()
            if kind < 0.6:
                self.apply(c.Complete, task_id=task_id, fencing_token=token, result_json='"ok"')
            elif kind < 0.8:
                self.apply(c.Fail, task_id=task_id, fencing_token=token, error="boom",
                           retryable=rnd.random() < 0.7)
            elif kind < 0.9:
                self.apply(c.Heartbeat, task_id=task_id, fencing_token=token, lease_ms=30_000)
                self.leased.append((task_id, token))
            else:
                self.apply(c.Release, task_id=task_id, fencing_token=token)
        elif r < 0.85:
            self.apply(c.Cancel, task_id=f"t{rnd.randrange(max(self.n, 1))}")
        elif r < 0.88:
            self.apply(c.SetTenant, tenant=f"ten{rnd.randrange(4)}",
                       max_running=rnd.randrange(0, 5), weight=rnd.randrange(1, 4))
        elif r < 0.9:
            self.schedule()
        else:
            self.apply(c.Tick)

    def schedule(self) -> None:
        sid = f"s{self.rnd.randrange(3)}"
        if self.rnd.random() < 0.5:
            self.apply(c.PutSchedule, tenant="ten0", schedule_id=sid, cron="* * * * *",
                       template=c.TaskTemplate(task_type="report"), next_fire_ms=self.now + 60_000)
        else:
            self.apply(c.Fire, tenant="ten0", schedule_id=sid, fire_ms=self.now,
                       next_fire_ms=self.now + 60_000, manual=True)

    def restore(self) -> None:
        """Replace the state with its own snapshot: a restored replica must go on alike."""
        self.sm = StateMachine.restore(self.sm.snapshot())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=3_000)
    args = p.parse_args()
    w = Workload(args.seed)
    for i in range(args.steps):
        w.step()
        if i == args.steps // 2:
            w.restore()
    build = "compiled" if hasattr(StateMachine, "__mypyc_attrs__") else "python"
    print(orjson.dumps({"build": build, "digest": w.sm.digest(),
                        "state_digest": w.sm.state_digest(), "answers": w.answers.hexdigest(),
                        "tasks": len(w.sm.tasks), "requests": w.n}).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
