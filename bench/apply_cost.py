"""One replica's state-machine work per task lifecycle, in one process: the proposer's
encoding, then decoding and applying each batch (digest folding included), for N tasks
submitted in batches of 500, claimed 100 at a time by 5 claims per round and completed
100 per batch, with the claims `--lag` submit batches behind (a backlog, as under load).
With `--render` each answer is also rendered and serialised as the node answers it
(`present.result`, then orjson), which a node does for the commands it proposed.

Prints (asserts nothing) CPU microseconds per lifecycle. On a shared machine CPU time is
noisy; instruction counts are not, so the figures quoted in commit messages come from
valgrind, run twice to subtract start-up:

    .venv/bin/python -m bench.apply_cost --tasks 20000 [--render]
    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python -m bench.apply_cost --tasks 6000 --lag 6      # and --tasks 0
    # (instructions(6000) - instructions(0)) / 6000 = instructions per lifecycle
"""
from __future__ import annotations

import argparse
import random
import time

import orjson

from tsched.statemachine import StateMachine, codec
from tsched.statemachine import commands as c

T0 = 1_800_000_000_000
BATCH = 500


def run(n: int, lag: int, seed: int = 7, render: bool = False) -> int:
    rnd = random.Random(seed)
    if render:
        from tsched.node.present import result as present

    def rid() -> str:
        return "%024x" % rnd.getrandbits(96)

    sm = StateMachine()

    def commit(cmds: list) -> list:
        results = sm.apply_batch(codec.decode_batch(codec.encode_batch(cmds)))
        if render:
            orjson.dumps([present(cmd, r) for cmd, r in zip(cmds, results)])
        return results

    submits = [[c.SubmitTask(request_id=rid(), now_ms=T0, task_id=rid(), tenant="default",
                             task_type="x", payload_json='{"n":1}') for _ in range(BATCH)]
               for _ in range(n // BATCH)]
    claimed: list[list[tuple[str, int]]] = []
    for j, batch in enumerate(submits + [[]] * (lag + 2)):
        if batch:
            commit(batch)
        if j >= lag:
            got = []
            for r in commit([c.Claim(request_id=rid(), now_ms=T0 + j, worker_id="w",
                                     task_types=("x",), max_tasks=100, lease_ms=600_000)
                             for _ in range(5)]):
                if r.value:
                    got += [(t.task_id, t.fencing_token) for t in r.value["tasks"]]
            claimed.append(got)
        if len(claimed) > 1:
            done = claimed.pop(0)
            for i in range(0, len(done), 100):
                commit([c.Complete(request_id=rid(), now_ms=T0 + j, task_id=t,
                                   fencing_token=f) for t, f in done[i:i + 100]])
    sm.digest()
    return sum(1 for t in sm.tasks.values() if t.state == "completed")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=20_000)
    p.add_argument("--lag", type=int, default=10, help="claims trail submits by this many batches")
    p.add_argument("--render", action="store_true", help="also render every answer as the node does")
    args = p.parse_args()
    start = time.process_time()
    done = run(args.tasks, args.lag, render=args.render)
    print_cpu_figure("apply", f"--tasks {args.tasks} --lag {args.lag}"
                     + (" --render" if args.render else ""),
                     time.process_time() - start, args.tasks, done)
    return 0


def print_cpu_figure(name: str, flags: str, cpu_s: float, tasks: int, done: int) -> None:
    """The command line and, for a run with tasks, CPU us per lifecycle (`bench.<name>_cost`)."""
    print(f"command : python -m bench.{name}_cost {flags}")
    if tasks:
        print(f"FIGURE {name}_cpu_us_per_lifecycle: {cpu_s / tasks * 1e6:.1f} us "
              f"({done} of {tasks} completed)")


if __name__ == "__main__":
    raise SystemExit(main())
