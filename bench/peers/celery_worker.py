"""A Celery worker process for the benchmark, started and stopped by it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis

from bench.peers import celery_app

REPO = Path(__file__).resolve().parents[2]


class CeleryWorker:
    def __init__(self, redis_url: str, pool: str = "prefork", concurrency: int = 2) -> None:
        self.redis_url, self.pool, self.concurrency = redis_url, pool, concurrency
        self.proc: subprocess.Popen | None = None

    def start(self, log_path: str) -> "CeleryWorker":
        env = {**os.environ, "TSCHED_BENCH_REDIS_URL": self.redis_url,
               "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        argv = [sys.executable, "-m", "celery", "-A", "bench.peers.celery_app", "worker",
                "-P", self.pool, "-c", str(self.concurrency), "-l", "warning",
                "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", "bench@%h"]
        with open(log_path, "a") as log:
            self.proc = subprocess.Popen(argv, env=env, cwd=str(REPO), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        return self

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until one task has run end to end (worker up, connected, pool started)."""
        r = redis.Redis.from_url(self.redis_url)
        r.delete(celery_app.DONE_KEY)
        celery_app.noop.apply_async((0,))
        deadline = time.monotonic() + timeout_s
        while int(r.get(celery_app.DONE_KEY) or 0) < 1:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"celery worker exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"celery worker not ready within {timeout_s} s")
            time.sleep(0.05)
        r.delete(celery_app.DONE_KEY)

    def stop(self) -> None:
        if not self.proc or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGQUIT)  # cold shutdown: held ETA tasks are not waited for
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=15)
