"""Nodes forked from a zygote (tsched.node.zygote) instead of started from scratch.

A `tsnode` process spends about half a CPU-second importing before it reads its config; a
machine that starts hundreds of nodes (the test suite) lets `Zygotes` pay that once per node
id: `Zygotes.start` asks the zygote of that id to fork a child that runs the same command
line, in a session of its own with its own environment, folder and log, and returns a
`ForkedProcess`, which answers as the `subprocess.Popen` it replaces where the launcher
and the tests use it (pid, poll, wait, returncode, send_signal). One zygote per node id,
each with a hash seed of its own, so replicas of one cluster hash differently, as separate
interpreters do (the zygote's docstring says why that matters).

The client still never imports the node: a zygote is a subprocess (`python -m
tsched.node.zygote`), reached over a Unix socket pair.
"""
from __future__ import annotations

import json
import os
import secrets
import select
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# For a zygote to answer a start with the child's pid. A zygote started for this start first
# imports the node (half a CPU-second); on a loaded 2-core machine whose disk was throttled
# that took more than 10 s (a suite run in which every node of one module failed to start).
PID_WAIT_S = 60.0
HASH_SEED_MAX = 4294967295  # PYTHONHASHSEED's range


class ForkedProcess:
    """A node forked by a zygote, as a `subprocess.Popen` answers: its exit status arrives
    on `report` when the zygote reaps it."""

    def __init__(self, args: Sequence[str], report: socket.socket) -> None:
        self.args = list(args)
        self.report = report
        self.returncode: int | None = None
        self._buf = b""
        self.pid = 0        # none yet: the zygote's first message names it
        answer = self._message(PID_WAIT_S)
        if "pid" not in answer:
            report.close()
            raise ChildProcessError(f"the zygote did not fork {' '.join(self.args)!r}: "
                                    f"{answer or f'no answer within {PID_WAIT_S:.0f} s'}")
        self.pid = int(answer["pid"])

    def _message(self, timeout_s: float | None) -> dict:
        """The next line on the report socket; {} when none within `timeout_s`."""
        while b"\n" not in self._buf:
            ready, _, _ = select.select([self.report], [], [], timeout_s)
            if not ready:
                return {}
            chunk = self.report.recv(4096)
            if not chunk:
                return {"status": self._lost()}
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _lost(self) -> int:
        """The zygote went away before reporting: the child is no longer ours to reap;
        wait until it is gone and report it killed (at once if it was never forked)."""
        while self.pid and Path(f"/proc/{self.pid}").exists() and not _zombie(self.pid):
            time.sleep(0.05)
        return -9

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._message(0).get("status")
            self._closed()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode = self._message(left).get("status")
        self._closed()
        return self.returncode

    def _closed(self) -> None:
        if self.returncode is not None:
            self.report.close()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


class Zygotes:
    """One zygote per node id, started on first use; `close` ends them (their children
    run on)."""

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python
        self.controls: dict[str, socket.socket] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _control(self, node_id: str) -> socket.socket:
        if node_id not in self.controls or self.procs[node_id].poll() is not None:
            # SOCK_SEQPACKET: one request, one message, whatever its size
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            env = {**os.environ, "PYTHONHASHSEED": str(secrets.randbelow(HASH_SEED_MAX) + 1)}
            self.procs[node_id] = subprocess.Popen(
                [self.python, "-m", "tsched.node.zygote", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, env=env, start_new_session=True)
            theirs.close()
            self.controls[node_id] = mine
        return self.controls[node_id]

    def start(self, node_id: str, argv: Sequence[str], *, log: Path, cwd: Path | None,
              env: Mapping[str, str]) -> ForkedProcess:
        """Fork `argv` (`tsnode` and its options) for `node_id`, its output appended to
        `log`."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request = {"argv": list(argv), "env": dict(env), "log": str(Path(log).resolve()),
                   "cwd": str(Path(cwd).resolve()) if cwd else None}
        try:
            socket.send_fds(self._control(node_id), [json.dumps(request).encode()],
                            [theirs.fileno()])
        finally:
            theirs.close()
        return ForkedProcess(argv, mine)

    def close(self) -> None:
        for control in self.controls.values():
            control.close()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.controls.clear()
        self.procs.clear()
