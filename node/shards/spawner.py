"""How a sharded node's supervisor starts its shard processes: forked from a zygote, a fork
server of its own (node/forkserver.py), else as plain subprocesses.

A shard process is `tsnode --shard s`; started from scratch, it spends about half a
CPU-second importing the node before it reads its config, at every start and every
restart. The supervisor's zygote has paid that once: it is the supervisor itself, forked
before its event loop started (`forkserver.fork_server`, assembly.run), so it costs a fork
too. The supervisor asks it to fork each shard process with the supervisor's pipes as its
stdin and stdout and the node's log as its stderr. The zygote is the supervisor's child in
the node's process group, so its children are too: a signal to the node's group reaches
every shard as before. It lives as long as the supervisor holds its control socket; it
ignores SIGTERM and SIGINT so that it can report every shard's exit code. Its children's
parent is the zygote, so `SUPERVISOR_PID_ENV` names the zygote: a shard stops when it
goes, and it goes with the supervisor.

A zygote that died (or a supervisor given none) is replaced by a fresh one, `python -m
tsched.node.zygote`, once per start; if that fails too, the shard process is a plain
subprocess (`asyncio.create_subprocess_exec`), as it was before zygotes.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
from typing import Protocol

from tsched.node.shards.parent_link import SUPERVISOR_PID_ENV

log = logging.getLogger("tsched.node.supervisor")

ZYGOTE_PID_WAIT_S = 10.0     # for a fork's pid; a zygote slower than that is replaced
# How a shard process starts when not forked (its options follow)
NODE_MAIN = (sys.executable, "-m", "tsched.node.main")


class ShardProc(Protocol):
    """What the supervisor uses of a shard process (asyncio.subprocess.Process has it)."""
    pid: int

    @property
    def returncode(self) -> int | None: ...
    @property
    def stdin(self) -> asyncio.StreamWriter | None: ...
    @property
    def stdout(self) -> asyncio.StreamReader | None: ...
    async def wait(self) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


class ForkedShard:
    """A shard process forked by the zygote: its pipes, and its exit status as the zygote
    reports it (read once, by a task of its own: the supervisor's run and stop both wait)."""

    def __init__(self, pid: int, report: asyncio.StreamReader, stdin: asyncio.StreamWriter,
                 stdout: asyncio.StreamReader, report_writer: asyncio.StreamWriter) -> None:
        self.pid = pid
        self.stdin: asyncio.StreamWriter | None = stdin
        self.stdout: asyncio.StreamReader | None = stdout
        self._status: int | None = None
        self._ended = asyncio.Event()
        self._watch = asyncio.get_running_loop().create_task(
            self._reported(report, report_writer, stdin))

    async def _reported(self, report: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        stdin: asyncio.StreamWriter) -> None:
        try:
            line = await report.readline()
            # no line: the zygote died before it reaped the shard (a SIGKILL of the whole
            # node), which went with it
            self._status = int(json.loads(line)["status"]) if line else -9
        finally:
            if self._status is None:
                self._status = -9
            writer.close()
            stdin.close()
            self._ended.set()

    @property
    def returncode(self) -> int | None:
        return self._status

    async def wait(self) -> int:
        await self._ended.wait()
        assert self._status is not None, "set before the event"
        return self._status

    def send_signal(self, sig: int) -> None:
        if self._status is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass    # exited; its status is on its way

    def kill(self) -> None:
        self.send_signal(9)


class ZygoteProc(Protocol):
    """What the spawner uses of its zygote (asyncio.subprocess.Process has it)."""
    pid: int

    @property
    def returncode(self) -> int | None: ...
    async def wait(self) -> int: ...
    def kill(self) -> None: ...


class ForkedZygote:
    """The zygote the supervisor forked from itself before its event loop started
    (forkserver.fork_server): a child that no asyncio watcher knows, reaped here."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._code: int | None = None

    @property
    def returncode(self) -> int | None:
        if self._code is None:
            self._reap(os.WNOHANG)
        return self._code

    async def wait(self) -> int:
        """Once its control socket is closed (it exits then): a thread waits for it."""
        if self._code is None:
            await asyncio.to_thread(self._reap, 0)
        return self._code if self._code is not None else -9

    def _reap(self, options: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, options)
        except ChildProcessError:   # reaped already, by the other of returncode and wait
            if self._code is None:
                self._code = -9
            return
        if pid:
            self._code = os.waitstatus_to_exitcode(status)

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, 9)


class Spawner:
    """Starts shard processes; `close` ends the zygote once they have stopped. `forked`:
    the zygote the supervisor forked from itself (forkserver.fork_server), if it did."""

    def __init__(self, label: list[str] | None = None,
                 forked: tuple[int, socket.socket] | None = None) -> None:
        self.label = list(label or [])      # shown by `ps` after a fresh zygote's own argv
        self.zygote: ZygoteProc | None = None
        self.control: socket.socket | None = None
        if forked is not None:
            self.zygote, self.control = ForkedZygote(forked[0]), forked[1]
        self.starting = asyncio.Lock()     # shards start together: one zygote for all

    async def _zygote(self) -> socket.socket | None:
        async with self.starting:
            if self.zygote is not None and self.zygote.returncode is None:
                return self.control
            if self.control is not None:
                self.control.close()
            return await self._new_zygote()

    async def _new_zygote(self) -> socket.socket | None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.zygote = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tsched.node.zygote", str(theirs.fileno()),
                *self.label, pass_fds=[theirs.fileno()], stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL)
        except OSError as e:
            log.warning("event=zygote_unavailable error=%r: shard processes start plainly", e)
            mine.close()
            return None
        finally:
            theirs.close()
        self.control = mine
        return mine

    async def start(self, options: list[str], env: dict[str, str]) -> ShardProc:
        """`tsnode` with `options` (`--shard s ...`) and `env`: stdin and stdout
        piped to the supervisor, stderr its own."""
        control = await self._zygote()
        if control is not None and self.zygote is not None:
            try:
                return await self._fork(control, self.zygote.pid, options, env)
            except (OSError, ValueError, asyncio.TimeoutError) as e:
                log.warning("event=zygote_failed error=%r: this shard starts plainly", e)
                if self.zygote.returncode is None:
                    self.zygote.kill()
        return await asyncio.create_subprocess_exec(
            *NODE_MAIN, *options, env=env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE)

    async def _fork(self, control: socket.socket, zygote_pid: int, options: list[str],
                    env: dict[str, str]) -> ForkedShard:
        loop = asyncio.get_running_loop()
        report, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        request = {"argv": ["tsnode", *options], "log": None, "cwd": os.getcwd(),
                   "env": {**env, SUPERVISOR_PID_ENV: str(zygote_pid)}}
        try:
            socket.send_fds(control, [json.dumps(request).encode()],
                            [theirs.fileno(), in_r, out_w, 2])
        except OSError:
            for fd in (in_w, out_r):
                os.close(fd)
            report.close()
            raise
        finally:
            theirs.close()
            os.close(in_r)
            os.close(out_w)
        try:
            reader, writer = await asyncio.open_unix_connection(sock=report)
            line = await asyncio.wait_for(reader.readline(), ZYGOTE_PID_WAIT_S)
            pid = int(json.loads(line)["pid"])
        except BaseException:
            for fd in (in_w, out_r):
                os.close(fd)
            report.close()
            raise
        stdout = asyncio.StreamReader(loop=loop)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdout),
                                     os.fdopen(out_r, "rb", 0))
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(in_w, "wb", 0))
        stdin = asyncio.StreamWriter(transport, protocol, None, loop)
        return ForkedShard(pid, reader, stdin, stdout, writer)

    async def close(self) -> None:
        """After every shard process has stopped: the zygote exits with its socket."""
        if self.control is not None:
            self.control.close()
        if self.zygote is not None:
            await self.zygote.wait()
