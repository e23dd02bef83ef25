"""A throwaway PostgreSQL server for tests: `initdb` into a fresh folder, `postgres` on a free
loopback port, stopped (fast shutdown) and removed afterwards.

The binaries are found on PATH or in Debian's /usr/lib/postgresql/<version>/bin (`.ci/run`
installs Debian's postgresql). PostgreSQL refuses to run as root, so as root the server runs
as the `postgres` user (which that package creates). Tests that need it skip, saying why,
where it cannot be had."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.harness.ports import free_port

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


def binaries() -> Path | None:
    """The folder holding `initdb` and `postgres`, or None."""
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(os.path.realpath(found)).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    return versions[-1].parent if versions else None


def unavailable_reason() -> str | None:
    """Why no server can be started here, or None when one can."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (it comes with the test extra)"
    if binaries() is None:
        return "PostgreSQL's initdb and postgres are not installed (Debian: apt-get install postgresql)"
    if os.geteuid() == 0 and not _user_exists("postgres"):
        return "running as root without a `postgres` user to run the server as"
    return None


def _user_exists(name: str) -> bool:
    import pwd
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


class PostgresServer:
    """`with PostgresServer() as pg: psycopg.connect(pg.dsn)`."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="tsched-pg-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.dsn = f"host=127.0.0.1 port={self.port} user=tsched dbname=postgres"

    def _server_user(self) -> dict:
        """Popen's arguments that run a process as `postgres` when this one is root."""
        if os.geteuid() != 0:
            return {}
        return {"user": "postgres", "group": "postgres", "extra_groups": []}

    def __enter__(self) -> PostgresServer:
        bin_dir = binaries()
        assert bin_dir is not None, unavailable_reason()
        if os.geteuid() == 0:
            shutil.chown(self.dir, user="postgres")
        data = self.dir / "data"
        subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", "tsched", "--auth=trust",
                        "--no-sync", "-E", "UTF8"], check=True, capture_output=True, timeout=120,
                       cwd=self.dir, **self._server_user())
        with open(self.dir / "server.log", "wb") as log:
            self.proc = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(data), "-p", str(self.port),
                 "-k", str(self.dir), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
                stdout=subprocess.DEVNULL, stderr=log, cwd=self.dir, **self._server_user())
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import psycopg
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited at start: {self.log()}")
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not accept connections: {self.log()}") from None
                time.sleep(0.05)   # polling for readiness, bounded by the deadline

    def log(self) -> str:
        path = self.dir / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)          # fast shutdown
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
