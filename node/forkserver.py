"""A fork server of `tsnode` processes: a process that has imported the node once forks
one child per request, and each child runs `tsnode`'s command line as a process of its
own. Two starters use it: `python -m tsched.node.zygote` (node/zygote.py) for a machine
that starts hundreds of nodes (a test suite, client/forked.py), and a sharded node's
supervisor, which forks its server from itself before its event loop starts
(`fork_server`, shards/spawner.py) and asks it for each shard process.

Theory of operation. Starting `tsnode` costs about half a CPU-second before it reads its
config, nearly all of it importing (aiohttp alone loads the system's CA bundle twice). The
server pays the imports once, while it is single-threaded, then forks: each child runs the
very `tsnode` command line in a process of its own, with its own environment, working
folder and standard streams, exactly as a `subprocess.Popen` would have started it; only
the import is shared.

The protocol, on the Unix socket the starter holds: a request is one JSON object {argv,
env, cwd, log} sent with a fresh socket of the starter's for that child, and, when `log`
is null, the child's stdin, stdout and stderr after it. The server answers on that socket
{"pid": N} once forked and {"status": S} when the child is reaped (S as
`subprocess.Popen.returncode`: negative for a signal), then closes it. A child with a
log runs in a session of its own (a launched node); one given its stdio stays in the
server's process group, which is its starter's (a shard process, whom a signal to the
node's group reaches). The server exits when the control socket closes (its starter is
gone); its children run on, as a Popen's would, and a shard process learns it from its
parent-death signal.

What a fork cannot give: a hash seed of the child's own. Every child of one server shares
its `PYTHONHASHSEED`, so the test launcher runs one server per node id, each with a seed
of its own: replicas of one cluster still iterate hashed containers in different orders.
A sharded node's shard processes share their node's seed, as they did when each started
from the node's environment; replicas of one shard group are on different nodes.
"""
from __future__ import annotations

import atexit
import gc
import json
import os
import selectors
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

REQUEST_BYTES_MAX = 1 << 20     # argv and environment of one node
FDS_MAX = 4                     # the report socket, then stdin, stdout and stderr
# `tsnode`'s command line, given the arguments after the program's name (main.cli)
Entry = Callable[[list[str]], object]


def _stdio(req: dict[str, Any], fds: list[int]) -> None:
    """The child's stdin, stdout and stderr: the log file of a launched node in a session
    of its own, or the three descriptors its starter sent."""
    if req.get("log"):
        os.setsid()
        log = os.open(req["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        fds = [os.open(os.devnull, os.O_RDONLY), log, log]
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))


def _run_child(req: dict[str, Any], stdio: list[int], entry: Entry) -> int:
    """In the forked child: become the node process the request describes, run `tsnode`'s
    command line (`entry`, given the arguments after the program's name), and return its
    exit code (as the interpreter would at exit)."""
    _stdio(req, stdio)
    if req.get("cwd"):
        os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = list(req["argv"])
    try:
        entry(sys.argv[1:])
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def _child(req: dict[str, Any], stdio: list[int], entry: Entry) -> None:
    """The forked child never returns into the zygote's loop."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        code = _run_child(req, stdio, entry)
        threading._shutdown()      # type: ignore[attr-defined]  # as at interpreter exit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


class Zygote:
    """The parent: takes requests on the control socket, forks, reports exits."""

    def __init__(self, control: socket.socket, entry: Entry) -> None:
        self.control = control
        self.entry = entry
        self.children: dict[int, socket.socket] = {}   # pid -> that child's report socket
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)

    def serve(self) -> None:
        # It lives exactly as long as its control socket: a signal to its starter's group
        # (a node's SIGTERM) is for the node and its children, and a zygote gone first
        # could not report their exit codes.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.sel.register(self.control, selectors.EVENT_READ, "control")
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        while True:
            for key, _ in self.sel.select():
                if key.data == "wake":
                    os.read(self.wake_r, 4096)
                    self.reap()
                elif not self.request():
                    return
            self.reap()

    def request(self) -> bool:
        """One start request; False when the launcher has gone."""
        msg, fds, _, _ = socket.recv_fds(self.control, REQUEST_BYTES_MAX, FDS_MAX)
        if not msg:
            return False
        report = socket.socket(fileno=fds[0])
        pid = os.fork()
        if pid == 0:
            _child(json.loads(msg), fds[1:], self.entry)
        for fd in fds[1:]:      # the child's now: a pipe end held here would never close
            os.close(fd)
        try:
            report.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        except OSError:
            pass    # the launcher gave up waiting: the child runs on, reaped as any other
        self.children[pid] = report
        return True

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            report = self.children.pop(pid, None)
            if report is not None:
                try:
                    code = os.waitstatus_to_exitcode(status)   # as Popen.returncode
                    report.sendall(json.dumps({"status": code}).encode() + b"\n")
                except OSError:
                    pass    # the launcher dropped this child's handle
                report.close()


def serve(control: socket.socket, entry: Entry) -> None:
    """Serve requests on `control` until the starter closes it; `entry` runs in each child."""
    gc.collect()
    gc.freeze()     # the imported modules stay shared with every child (no copy on write)
    Zygote(control, entry).serve()


def fork_server(entry: Entry) -> tuple[int, socket.socket] | None:
    """A server forked from this process (its pid, and the starter's end of its control
    socket), or None where the fork failed. Call it while this process has one thread:
    the server is a copy of it, with its imports and none of its threads. The server's
    stdin and stdout are /dev/null and its stderr this process's (a node's log); it holds
    no other descriptor of this process's."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        pid = os.fork()
    except OSError:
        mine.close()
        theirs.close()
        return None
    if pid == 0:
        _become_server(mine, theirs, entry)
    theirs.close()
    return pid, mine


def _become_server(mine: socket.socket, theirs: socket.socket, entry: Entry) -> None:
    """In the forked server: never returns into the starter's code."""
    code = 1
    try:
        mine.close()
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        keep = theirs.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
        serve(theirs, entry)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)
