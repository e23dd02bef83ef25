"""One Worker process for bench/dead_worker.py: a no-op handler that writes the id of every
task it starts to its log (unbuffered, so a SIGKILL loses no line), until it is stopped.

    python -m bench.lib.session_worker --urls URL,URL --task-type T --log FILE
        [--concurrency 4] [--lease-s 30] [--session-timeout-s 3 | 0 (no session)]
        [--go FILE]   # start only once FILE exists (both workers of a run start together)
"""
from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--urls", required=True)
    p.add_argument("--task-type", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--lease-s", type=float, default=30.0)
    p.add_argument("--session-timeout-s", type=float, default=3.0)
    p.add_argument("--go")
    args = p.parse_args()
    from tsched.client import Worker
    fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def handler(payload, ctx):
        os.write(fd, f"{ctx.task_id}\n".encode())   # one write(2): whole lines only

    worker = Worker(args.urls.split(","), {args.task_type: handler}, worker_id=args.worker_id,
                    concurrency=args.concurrency, lease_s=args.lease_s, wait_s=1.0,
                    grace_s=5.0, session_timeout_s=args.session_timeout_s or None)
    print("ready", flush=True)
    while args.go and not os.path.exists(args.go):
        time.sleep(0.001)   # a start signal across processes, not synchronisation
    worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
