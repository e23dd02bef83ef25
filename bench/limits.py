"""Keyed limits (docs/DESIGN.md section 15): what they cost the state machine's claims.

Prints (asserts nothing), CPU time of this process (time.process_time), the state machine
driven through `StateMachine.apply` (the real path, with validation):

1. Claim cost with 10,000 tasks held by a spent limit, against none: microseconds per
   claimed (unlimited) task. Held tasks wait in their limit's index, so the figure should
   not move.
2. Unlimited tasks while half the load is limited to 100/s, on a simulated clock (a claim
   of 20 every 10 ms over both types, the limited tasks first in claim order): unlimited
   tasks claimed per simulated second and CPU per claimed task, against a run of the
   unlimited half alone. The unlimited half must not slow down: it gets every place the
   limit's 100/s leaves (1,900 of 2,000/s here).
3. A plain run with no limit declared (submit, claim, complete), A/B against another
   revision (`--baseline`, default: where this branch left main), each side in a fresh
   process: microseconds per lifecycle, medians of `--runs`.

    .venv/bin/python bench/limits.py [--runs 5] [--baseline REV]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

T0 = 1_700_000_000_000
REPO = Path(__file__).resolve().parents[1]
HELD = 10_000
_ids = iter(range(10 ** 9))


def _rid() -> str:
    return f"r{next(_ids)}"


def _machine():
    from tsched.statemachine import StateMachine
    return StateMachine()


def _submit(sm, n: int, task_type: str, now: int, limits: tuple[str, ...] = ()) -> None:
    from tsched.statemachine import commands as c
    for _ in range(n):
        kw = {"limits": limits} if limits else {}
        sm.apply(c.SubmitTask(request_id=_rid(), now_ms=now, task_id=f"t{next(_ids)}",
                              tenant="bench", task_type=task_type, **kw))


def _claim(sm, now: int, types: tuple[str, ...], max_tasks: int) -> list:
    from tsched.statemachine import commands as c
    out = sm.apply(c.Claim(request_id=_rid(), now_ms=now, worker_id="w", task_types=types,
                           max_tasks=max_tasks, lease_ms=3_600_000))
    return out.value["tasks"]


def held_claim_cost_us(held: int, claims: int = 2_000) -> float:
    """µs per claimed unlimited task with `held` tasks held by a spent limit."""
    from tsched.statemachine import commands as c
    sm = _machine()
    if held:
        sm.apply(c.PutLimit(request_id=_rid(), now_ms=T0, name="spent", rate=1,
                            per_ms=3_600_000))
        _submit(sm, held + 1, "work", T0, ("spent",))
        while len(sm.store.limiter.held_of) < held:   # claims meet them: all held
            _claim(sm, T0, ("work",), 100)
    _submit(sm, claims, "work", T0 + 1)
    start = time.process_time()
    got = sum(len(_claim(sm, T0 + 2, ("work",), 1)) for _ in range(claims))
    assert got == claims, "the unlimited backlog ran dry"
    return (time.process_time() - start) / got * 1e6


def mixed_run(limited: bool, seconds: int = 5) -> tuple[float, float]:
    """(unlimited tasks claimed per simulated second, CPU µs per claimed task)."""
    from tsched.statemachine import commands as c
    sm = _machine()
    free = 1_000 * seconds
    if limited:   # first in claim order: every claim meets them before the free ones
        sm.apply(c.PutLimit(request_id=_rid(), now_ms=T0, name="partner", rate=100,
                            per_ms=1_000))
        _submit(sm, free, "partner", T0, ("partner",))
    _submit(sm, free, "free", T0)
    claimed = cpu = 0.0
    free_claimed = 0
    now = T0
    while free_claimed < free:
        now += 10
        start = time.process_time()
        tasks = _claim(sm, now, ("partner", "free"), 20)
        cpu += time.process_time() - start
        claimed += len(tasks)
        free_claimed += sum(t.task_type == "free" for t in tasks)
    elapsed_s = (now - T0) / 1000
    return free_claimed / elapsed_s, cpu / claimed * 1e6


def plain_lifecycle_us(n: int = 5_000) -> float:
    """µs of CPU per lifecycle (submit, claim by tens, complete), no limit declared."""
    from tsched.statemachine import commands as c
    sm = _machine()
    start = time.process_time()
    _submit(sm, n, "plain", T0)
    done = 0
    while done < n:
        for t in _claim(sm, T0 + 1, ("plain",), 10):
            sm.apply(c.Complete(request_id=_rid(), now_ms=T0 + 2, task_id=t.task_id,
                                fencing_token=t.fencing_token))
            done += 1
    return (time.process_time() - start) / n * 1e6


def _median(fn, runs: int) -> float:
    return statistics.median(fn() for _ in range(runs))


def _plain_in(pythonpath: str | None, runs: int) -> float:
    """plain_lifecycle_us in a fresh process (another revision's tsched first on the path)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, str(REPO)])
    code = ("from bench.limits import plain_lifecycle_us, _median;"
            f"print(_median(plain_lifecycle_us, {runs}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True,
                         capture_output=True, text=True)
    return float(out.stdout.strip())


def _merge_base() -> str:
    return subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--baseline", help="revision for the plain A/B (default: merge-base "
                   "with main)")
    args = p.parse_args()
    print(f"# bench/limits.py on {platform.node()} ({platform.processor() or 'cpu?'}), "
          f"python {platform.python_version()}, medians of {args.runs}")
    print(f"  command: {sys.executable} bench/limits.py --runs {args.runs}")
    none = _median(lambda: held_claim_cost_us(0), args.runs)
    held = _median(lambda: held_claim_cost_us(HELD), args.runs)
    print(f"claim cost, unlimited tasks:   {none:7.1f} us/task with no held task, "
          f"{held:7.1f} us/task with {HELD:,} held by a spent limit ({held / none:.2f}x)")
    alone = [mixed_run(False) for _ in range(args.runs)]
    mixed = [mixed_run(True) for _ in range(args.runs)]
    print(f"unlimited tasks, alone:        {statistics.median(r[0] for r in alone):7.0f}/s "
          f"(simulated), {statistics.median(r[1] for r in alone):6.1f} us CPU per claimed task")
    print(f"unlimited with half at 100/s:  {statistics.median(r[0] for r in mixed):7.0f}/s "
          f"(simulated), {statistics.median(r[1] for r in mixed):6.1f} us CPU per claimed task")
    rev = args.baseline or _merge_base()
    with tempfile.TemporaryDirectory() as tmp:
        from bench.lib.revision import extract_tree
        base = _plain_in(extract_tree(rev, tmp), args.runs)
        this = _plain_in(None, args.runs)
    print(f"plain lifecycle, no limits:    {this:7.1f} us here, {base:7.1f} us at {rev[:10]} "
          f"({this / base:.3f}x)")


if __name__ == "__main__":
    main()
