"""A private redis-server on a free loopback port, started and stopped by the benchmark."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import time

from tsched.client.launcher import free_port

INSTALL_HINT = "redis-server is not installed: `apt-get install redis-server` (Debian/Ubuntu)"


class RedisServer:
    def __init__(self, appendfsync: str = "everysec") -> None:
        self.exe = shutil.which("redis-server")
        if not self.exe:
            raise SystemExit(INSTALL_HINT)
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="tsched-bench-redis-")
        self.appendfsync = appendfsync
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def version(self) -> str:
        out = subprocess.run([self.exe, "--version"], capture_output=True, text=True).stdout
        return out.split()[2] if len(out.split()) > 2 else out.strip()

    def start(self) -> "RedisServer":
        # appendonly with the chosen fsync policy: the broker's durability is printed beside
        # tsched's (which fsyncs every group commit), so the comparison is read knowingly.
        args = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "no" if self.appendfsync == "off" else "yes",
                "--protected-mode", "yes", "--daemonize", "no", "--loglevel", "warning"]
        if self.appendfsync != "off":
            args += ["--appendfsync", self.appendfsync]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self._wait_ping(10.0)
        return self

    def _wait_ping(self, timeout_s: float) -> None:
        import redis
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                if self.proc and self.proc.poll() is not None:
                    raise RuntimeError("redis-server exited at start") from None
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
