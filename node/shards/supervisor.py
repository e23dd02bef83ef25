"""`tsnode` of a cluster with several shards: one OS process per local shard replica, and
the router on the node's public HTTP address (DESIGN.md section 13).

A shard process is today's node for one shard (`tsnode --shard s`), on the shard's Raft
port and an internal HTTP port. One that dies is started again after a backoff that
doubles up to `RESTART_BACKOFF_MAX_S` (and starts over once it has run for
`RESTART_RESET_S`). SIGTERM/SIGINT stop the router, then every shard process. Shard
processes end themselves when the supervisor dies, even by SIGKILL: the kernel sends them
SIGTERM (PR_SET_PDEATHSIG on Linux) and each also watches its parent's pid.

A shard process that stops on damaged or full storage (its exit codes in `FATAL_EXIT_CODES`)
is not started again: starting it would only fail the same way. The whole node stops with
that code, loudly, as a single-group node does, so that an operator repairs it (for damage,
`tsnode --rejoin-empty`).
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from tsched.statemachine.limits import API_LIMITS

from tsched.node import topology as shards_mod
from tsched.node import tls
from tsched.node.config import ClusterConfig, NodeConfig
from tsched.node.gcpolicy import settle_router
from tsched.node.shards.leader_spread import SPREAD_CHECK_S, Spreader
from tsched.node.shards.parent_link import SUPERVISOR_PID_ENV
from tsched.node.raft.storage_faults import STORAGE_CORRUPT_EXIT_CODE, STORAGE_ERROR_EXIT_CODE
from tsched.node.raft.membership import members_path
from tsched.node.shards.router import Router
from tsched.node.shards.router_app import make_router_app
from tsched.node.shards.spawner import ShardProc, Spawner
from tsched.node.shards.upstream import Upstreams

log = logging.getLogger("tsched.node.supervisor")

RESTART_BACKOFF_FIRST_S = 0.5
RESTART_BACKOFF_MAX_S = 10.0
RESTART_RESET_S = 30.0          # a process that ran this long restarts without delay growth
STOP_WAIT_S = 10.0              # per shard process, after SIGTERM, before SIGKILL
SHUTDOWN_S = 3.0
FATAL_EXIT_CODES = (STORAGE_ERROR_EXIT_CODE, STORAGE_CORRUPT_EXIT_CODE)


class ShardProcess:
    """One local shard replica's process, started again whenever it dies."""

    def __init__(self, shard: int, options: list[str], spawner: Spawner,
                 spreader: Spreader | None = None,
                 on_fatal: Callable[[int], None] | None = None,
                 joining: tuple[list[str], Path] | None = None) -> None:
        self.shard, self.options, self.spawner = shard, options, spawner
        # (`--join URL`, the replica's members.json): added to every start until the file
        # exists. A replica that stopped before it recorded its members must not start
        # again from a file that lists this node alone: that would be a group of one.
        self.joining = joining
        self.spreader = spreader
        self.on_fatal = on_fatal        # called with the exit code of a storage failure
        self.proc: ShardProc | None = None
        self.restarts = 0
        self.stopping = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = RESTART_BACKOFF_FIRST_S
        while not self.stopping:
            env = dict(os.environ, **{SUPERVISOR_PID_ENV: str(os.getpid())})
            # stdin: commands, and its end tells the process the supervisor is gone;
            # stdout: the process's status lines (its log goes to stderr, shared). It stays
            # in the supervisor's process group: a signal to the node's group (a SIGKILL or
            # SIGSTOP of the whole node, Ctrl-C in a terminal) reaches every shard too.
            options = self.options
            if self.joining is not None and not self.joining[1].exists():
                options = options + self.joining[0]
            self.proc = await self.spawner.start(options, env)
            started = loop.time()
            log.info("event=shard_started shard=%d pid=%d", self.shard, self.proc.pid)
            await self._read_status(self.proc)
            code = await self.proc.wait()
            if self.spreader is not None:
                self.spreader.forget(self.shard)
            if self.stopping:
                break
            if code in FATAL_EXIT_CODES:
                log.critical("event=shard_storage_failed shard=%d pid=%d code=%d: stopping "
                             "the node (see the shard's log for the file)", self.shard,
                             self.proc.pid, code)
                if self.on_fatal is not None:
                    self.on_fatal(code)
                break
            if loop.time() - started >= RESTART_RESET_S:
                backoff = RESTART_BACKOFF_FIRST_S
            self.restarts += 1
            log.warning("event=shard_exited shard=%d pid=%d code=%s restart_in_s=%.1f",
                        self.shard, self.proc.pid, code, backoff)
            await asyncio.sleep(backoff)   # a stop that came meanwhile ends the loop
            backoff = min(RESTART_BACKOFF_MAX_S, backoff * 2)

    async def _read_status(self, proc: ShardProc) -> None:
        stdout = proc.stdout
        assert stdout is not None, "shard processes start with stdout=PIPE"
        while True:
            try:
                line = await stdout.readline()
            except ValueError:      # a line longer than the stream's limit: not ours
                continue
            if not line:
                return
            if self.spreader is not None:
                self.spreader.note(self.shard, line)

    def send(self, command: str) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None and proc.stdin is not None:
            try:
                proc.stdin.write(command.encode() + b"\n")
            except (BrokenPipeError, ConnectionResetError):
                pass

    async def stop(self) -> None:
        self.stopping = True
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_WAIT_S)
        except TimeoutError:
            log.warning("event=shard_kill shard=%d pid=%d", self.shard, proc.pid)
            proc.kill()
            await proc.wait()


def shard_options(config_path: str, node_id: str, shard: int, log_format: str) -> list[str]:
    """`tsnode`'s options for one local shard replica (shards/spawner.py starts it)."""
    return ["--config", os.path.abspath(config_path),
            "--id", node_id, "--shard", str(shard), "--log-format", log_format]


async def run_supervisor(cfg: ClusterConfig, node_id: str, config_path: str, log_format: str,
                         join_url: str | None = None,
                         zygote: tuple[int, socket.socket] | None = None) -> int:
    """`cfg`: the node's view of the cluster (shards/joining.node_view). `join_url`: this
    node joined through it (`--join`): each shard process joins too, on every start until it
    has recorded its members (_joining). `zygote`: the fork server this process forked from
    itself before its loop started (shards/spawner.py), if it did."""
    me = cfg.node(node_id)
    shards_mod.stamp_data_dir(cfg, me)
    local = shards_mod.local_shards(cfg, node_id)
    spreader = Spreader(node_id, shards_mod.shards_of(cfg), len(cfg.nodes),
                        {s: [n.id for n in shards_mod.placement(cfg, s)] for s in local})
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    fatal: list[int] = []

    def halt() -> None:
        # First thing: a signal to the node's process group reaches the shard processes
        # too, and one that exits while the router drains is not started again (it was,
        # with a WARNING, up to SHUTDOWN_S after the stop).
        for p in procs.values():
            p.stopping = True
        stop.set()

    def on_fatal(code: int) -> None:
        fatal.append(code)
        halt()
    # `ps` names the node's config and id on the zygote and every shard forked from it
    spawner = Spawner(["--config", os.path.abspath(config_path), "--id", node_id], zygote)
    procs = {s: ShardProcess(s, shard_options(config_path, node_id, s, log_format), spawner,
                             spreader, on_fatal, _joining(cfg, me, s, join_url))
             for s in local}
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, halt)
    runs = [loop.create_task(p.run(), name=f"shard-{p.shard}") for p in procs.values()]
    runs.append(loop.create_task(_keep_spread(spreader, procs)))
    upstreams = Upstreams(cfg, node_id, ssl=tls.cluster_client_context(cfg))
    upstreams.leader_of = spreader.leader_of
    router = Router(cfg, node_id, upstreams)
    runner = web.AppRunner(make_router_app(router), access_log=None, handle_signals=False,
                           shutdown_timeout=SHUTDOWN_S)
    try:
        await runner.setup()
        settle_router()
        await web.TCPSite(runner, me.http_host, me.http_port, reuse_address=True,
                          backlog=API_LIMITS.accept_queue_connections_max,
                          ssl_context=tls.node_server_context(me)).start()
        log.info("event=http_listening addr=%s url=%s shards=%d local_shards=%s cluster=%s",
                 me.http, me.url, router.count, ",".join(map(str, local)), cfg.name)
        await stop.wait()
        log.info("event=stopping")
    finally:
        await runner.cleanup()
        await asyncio.gather(*(p.stop() for p in procs.values()))
        for t in runs:
            t.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
        await spawner.close()
    log.info("event=stopped")
    return fatal[0] if fatal else 0


def _joining(cfg: ClusterConfig, me: NodeConfig, shard: int, join_url: str | None) -> tuple[list[str], Path] | None:
    """A joining node's shard replicas join through this node's own router, which reaches
    the other members' replicas (the URL the node joined through may be gone by then)."""
    if join_url is None:
        return None
    return (["--join", me.url],
            members_path(Path(shards_mod.shard_data_dir(cfg, me, shard))))


async def _keep_spread(spreader: Spreader, procs: dict[int, ShardProcess]) -> None:
    while True:
        await asyncio.sleep(SPREAD_CHECK_S)
        move = spreader.check()
        if move is not None:
            shard, to = move
            log.info("event=leader_spread shard=%d to=%s", shard, to)
            procs[shard].send(f"transfer {to}")
