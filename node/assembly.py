"""The composition root: what one `tsnode` process is made of, and the order it is made in.

`run` takes the command line's options (main.py parses them) through the start-up steps:
the cluster's members (recorded, or asked of `--join`), a `--restore`, the data dir's
shape, TLS and HTTP exposure checks. Then it runs a sharded node's supervisor
(shards/supervisor.py), or `serve`s one node (or one shard replica): the Replica
(raft/replica.py), the `Node` of services handlers use (services.py), its aiohttp
application (api/app.py) with the services' lifecycle (`node_app`: the proposer, the
forwarder, the claim hub and the leader's timer), signals, and the graceful stop.
"""
from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import click
from aiohttp import web

from tsched.statemachine import Limits, StateMachine
from tsched.statemachine.limits import API_LIMITS

from tsched.node import config as config_mod
from tsched.node.config import ClusterConfig, NodeConfig
from tsched.node import present, tls
from tsched.node import topology as shards
from tsched.node.api import member_probe, members
from tsched.node.api.app import make_app
from tsched.node.api.auth import parse as parse_auth
from tsched.node.clock import Clock
from tsched.node.failpoints import Failpoints
from tsched.node.forkserver import Entry, fork_server
from tsched.node.forwarding import Forwarder
from tsched.node.gcpolicy import GcPolicy
from tsched.node.ops.archiver import Archive, archive_dir
from tsched.node.ops.log_format import LogContext, setup_logging
from tsched.node.ops.sd_notify import Notifier
from tsched.node.raft import join_group as join
from tsched.node.raft.handoff import hand_over
from tsched.node.raft.storage_faults import CorruptStorage, fatal_corruption
from tsched.node.raft.machine_kit import diverging_kit
from tsched.node.raft.proposer import Proposer
from tsched.node.raft.rejoin import discard_data
from tsched.node.raft.replica import Replica
from tsched.node.restore import RestoreRefused, restore
from tsched.node.scheduling.claim_hub import ClaimHub, enables_claims
from tsched.node.scheduling.session_watch import SessionWatch
from tsched.node.scheduling.timer import LeaderTimer
from tsched.node.services import NODE, Node
from tsched.node.shards.join_all_groups import node_view
from tsched.node.shards.leader_spread import shard_channel
from tsched.node.shards.parent_link import SUPERVISOR_PID_ENV, die_with_parent, watch_parent
from tsched.node.tls import cluster_client_context

log = logging.getLogger("tsched.node")

ROLE_CHECK_S = 0.5   # how often leadership is looked at for the event log
SHUTDOWN_S = 3.0     # in-flight requests get this long to finish on SIGTERM
# A node still stopping this long after SIGTERM (handoff 5 s + in-flight requests 3 s +
# the Raft thread's last tick) writes every thread's stack to stderr, its log: a stop that
# hangs says where.
STOP_STACKS_AFTER_S = 12.0


def run(config_path: str, node_id: str, log_format: str, shard: int | None,
        rejoin_empty: bool, restore_from: str | None, join_url: str | None,
        tsnode: Entry | None = None) -> int:
    """One `tsnode` process, from its options to its exit status: the start-up steps
    (members, restore, data dir, TLS, exposure), then a node's supervisor where the
    cluster has several shards, else the node (or, with `shard`, one shard replica).
    `tsnode`: the command line itself (main.cli), which a sharded node's shard processes
    run; without it they start as fresh interpreters."""
    try:
        cfg = config_mod.load(config_path)
        me = cfg.node(node_id)
        if shard is None:
            cfg = _membership(cfg, me, join_url)
            if restore_from is not None:
                _restore(cfg, me, restore_from)
            shards.check_data_dir(cfg, me)   # reads only: a refused data dir is left as it is
        else:     # its supervisor checked the data dir before starting it
            die_with_parent()              # first: a supervisor killed now takes us along
            cfg, me = _shard_membership(cfg, node_id, shard, join_url)
        _check_http_exposure(cfg, me)
        tls.node_server_context(me)        # unreadable certificates stop the node here
        tls.cluster_client_context(cfg)
        clock = Clock.from_env()
        raft_dial_from_env()  # refuse a malformed value before anything starts
    except (config_mod.ConfigError, ValueError) as e:
        click.echo(f"tsnode: {e}", err=True)
        return 2
    if shard is None and not shards.is_single_group(cfg):
        setup_logging(node_id, log_format)
        if rejoin_empty:
            _discard_local_data(cfg, me, shard)
        _use_uvloop()
        # Imported here: only a sharded node's supervisor process runs it, and its router
        # app and handlers cost a single-group node or a shard process ~23 ms at start.
        from tsched.node.shards.supervisor import run_supervisor
        # Its shard processes' zygote: this process, forked while it has one thread and
        # has imported the node (shards/spawner.py)
        zygote = fork_server(tsnode) if tsnode is not None else None
        return asyncio.run(run_supervisor(cfg, node_id, config_path, log_format, join_url,
                                          zygote))
    log_context = setup_logging(node_id if shard is None else f"{node_id}/s{shard}", log_format)
    if rejoin_empty:
        _discard_local_data(cfg, me, shard)
    _use_uvloop()
    gc_policy = GcPolicy()
    gc_policy.install()
    return asyncio.run(serve(cfg, node_id, clock, log_context, gc_policy, shard=shard))


def _membership(cfg: ClusterConfig, me: NodeConfig, join_url: str | None) -> ClusterConfig:
    """The cluster's members: recorded beside the log, or asked of `--join URL` (raft/join_group.py;
    a sharded node's supervisor: shards/join_all_groups.py)."""
    token, ssl = os.environ.get("TSCHED_JOIN_TOKEN"), tls.cluster_client_context(cfg)
    if not shards.is_single_group(cfg):
        return node_view(cfg, me, join_url, token, ssl)
    if join_url is None:
        return join.effective_config(cfg, me)
    return join.join(cfg, me, join_url, token, ssl)


def _shard_membership(cfg: ClusterConfig, node_id: str, shard: int, join_url: str | None
                      ) -> tuple[ClusterConfig, NodeConfig]:
    """A shard replica's process: its group's nodes at its shard's addresses; where every
    node holds every shard, its group's recorded members, or `--join`'s (raft/join_group.py)."""
    full = shards.is_full_placement(cfg)
    cfg, me = shards.shard_process_config(cfg, node_id, shard)
    if not full:
        return cfg, me
    if join_url is None:
        cfg = join.effective_config(cfg, me, sharded=True)
    else:
        cfg = join.join_shard(cfg, me, join_url, shard, os.environ.get("TSCHED_JOIN_TOKEN"),
                              tls.cluster_client_context(cfg))
    return cfg, cfg.node(node_id)


def _restore(cfg: ClusterConfig, me: NodeConfig, backup: str) -> None:
    """`--restore`: seed the data dir (node/restore.py); a refusal exits 2 with its reason."""
    try:
        head = restore(cfg, me, backup, limits=_limits(cfg))
    except RestoreRefused as e:
        click.echo(f"tsnode: restore refused: {e}", err=True)
        sys.exit(2)
    at = ", ".join(f"shard {s['shard']} at log index {s['raft_index']}" for s in head["sections"])
    click.echo(f"tsnode: restored {backup} (cluster {head['cluster']}, {head['shards']} "
               f"shard(s): {at}; taken {head['created_at']}) into {me.data_dir}", err=True)


def _discard_local_data(cfg: ClusterConfig, me: NodeConfig, shard: int | None) -> None:
    """`--rejoin-empty`: this replica's data, or, on a supervisor, every local shard
    replica's (each child then starts as a rejoining replica)."""

    if shard is not None or shards.is_single_group(cfg):
        discard_data(Path(me.data_dir))
        return
    for s in shards.local_shards(cfg, me.id):
        discard_data(Path(shards.shard_data_dir(cfg, me, s)))


def _check_http_exposure(cfg: ClusterConfig, me: NodeConfig) -> None:
    parse_auth(cfg.auth)   # a malformed [auth] stops the node here, with the reason
    if cfg.auth is None and not config_mod.is_loopback(me.http_host):
        raise config_mod.ConfigError(
            f"node {me.id}: refusing to serve HTTP on non-loopback {me.http} without an "
            "[auth] section (anyone could submit, claim and cancel tasks); configure [auth] "
            "or bind http to 127.0.0.1")


def _use_uvloop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def build_replica(cfg: ClusterConfig, node_id: str) -> Replica:
    failpoints, limits = Failpoints.from_env(), _limits(cfg)
    kit = {"machine": diverging_kit(limits)} if failpoints.on("diverge_apply") else {}
    return Replica.from_config(cfg, node_id, failpoints=failpoints, limits=limits,
                               dial_overrides=raft_dial_from_env(), **kit)


RAFT_DIAL_ENV = "TSCHED_RAFT_DIAL"


def raft_dial_from_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`TSCHED_RAFT_DIAL="127.0.0.1:8801=127.0.0.1:9901,..."`: Raft address -> address
    actually dialled. Fault-injection tests put a proxy on each link this way; the peer
    keeps its identity (DESIGN.md section 6)."""
    out: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in environ.get(RAFT_DIAL_ENV, "").split(","))):
        addr, sep, dial = item.partition("=")
        if not sep:
            raise config_mod.ConfigError(f"{RAFT_DIAL_ENV}: {item!r} is not raft_addr=dial_addr")
        config_mod.split_address(addr, RAFT_DIAL_ENV)
        config_mod.split_address(dial, RAFT_DIAL_ENV)
        out[addr] = dial
    return out


def _limits(cfg: ClusterConfig) -> Limits | None:
    if not cfg.limits:
        return None
    fields = dict(cfg.limits)
    if "shed_above" in fields:
        fields["shed_above_permille"] = _shed_permille(fields.pop("shed_above"))
    try:
        return Limits(**fields)
    except TypeError as e:
        raise config_mod.ConfigError(f"[limits]: {e}") from None


def _shed_permille(value: object) -> int:
    """`[limits] shed_above` (a fraction of live_tasks_max, 0 < f <= 1) as the state
    machine's integer permille (DESIGN 14.2)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise config_mod.ConfigError(f"[limits] shed_above must be a fraction in (0, 1], "
                                     f"not {value!r}")
    return round(value * 1000)


def _archive(cfg: ClusterConfig, data_dir: str, clock: Clock) -> Archive:
    """The node's archive (DESIGN 14.3), its expired day files pruned by the node's clock."""
    assert cfg.archive_dir is not None
    where = archive_dir(cfg.archive_dir, data_dir)
    archive = Archive(where, cfg.archive_keep_days)
    archive.prune(clock.now_ms())
    log.info("event=archive_enabled dir=%s keep_days=%d", where, cfg.archive_keep_days)
    return archive


async def serve(cfg: ClusterConfig, node_id: str, clock: Clock,
                log_context: LogContext | None = None,
                gc_policy: GcPolicy | None = None, shard: int | None = None) -> int:
    me = cfg.node(node_id)
    replica = build_replica(cfg, node_id)
    if log_context is not None:
        log_context.term_of = lambda: replica.term
    if cfg.archive_dir is not None:   # before start: the log's replay archives too
        replica.add_apply_listener(_archive(cfg, me.data_dir, clock).on_apply)
    try:
        replica.start()
    except CorruptStorage as exc:
        fatal_corruption(exc)          # before HTTP is up: never serve damaged data
    node = Node(node_id=node_id, config=cfg, replica=replica, clock=clock, gc_policy=gc_policy,
                shard=shard)
    if "propose_s" in cfg.timeouts:
        node.propose_timeout_s = cfg.timeouts["propose_s"]
    if "unclaimed_hint_s" in cfg.timeouts:
        node.claimed_types.window_s = cfg.timeouts["unclaimed_hint_s"]
    runner = web.AppRunner(node_app(node), access_log=None, handle_signals=False,
                           shutdown_timeout=SHUTDOWN_S)
    notifier = Notifier()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await runner.setup()
        await web.TCPSite(runner, me.http_host, me.http_port, reuse_address=True,
                          backlog=API_LIMITS.accept_queue_connections_max,
                          ssl_context=tls.node_server_context(me)).start()
        log.info("event=http_listening addr=%s url=%s raft=%s cluster=%s state_machine=%s",
                 me.http, me.url, me.raft, cfg.name, _state_machine_build())
        notifier.send("READY=1")
        background = [loop.create_task(_watch_role(node))]
        if shard is not None and os.environ.get(SUPERVISOR_PID_ENV):
            background.append(loop.create_task(watch_parent(stop)))
            background.append(loop.create_task(shard_channel(node, stop)))
        if gc_policy is not None:
            background.append(loop.create_task(
                gc_policy.run(lambda: not replica.is_ready_leader())))
        await stop.wait()
        log.info("event=stopping")
        notifier.send("STOPPING=1")
        faulthandler.dump_traceback_later(STOP_STACKS_AFTER_S, exit=False)
        replica.leaving = True     # no campaign, no leadership handed to it from now on
        await hand_over(replica)   # still serving: forwarded requests reach the successor
        for task in background:
            task.cancel()
        node.stop_event.set()
        if node.claims is not None:
            node.claims.abandon()   # long polls end now rather than at their wait_s
    finally:
        await runner.cleanup()
        replica.stop()
        faulthandler.cancel_dump_traceback_later()
    log.info("event=stopped")
    return 0


def _state_machine_build() -> str:
    """`compiled` where the optional mypyc build is installed (setup.py), else `python`."""
    return "compiled" if hasattr(StateMachine, "__mypyc_attrs__") else "python"


async def _watch_role(node: Node) -> None:
    """Log leadership changes as they are seen; a new leader starts watching which task
    types workers ask for (scheduling/claimed_types.py) from then on."""
    last = None
    while True:
        now = (node.replica.leader_id(), node.replica.is_ready_leader())
        if now != last:
            log.info("event=leader_changed leader=%s ready_leader=%s", now[0], now[1])
            last = now
        if now[1]:
            node.claimed_types.watch(node.replica.term, time.monotonic())
        await asyncio.sleep(ROLE_CHECK_S)


# --- the services' lifecycle, with the application ---------------------------------------

def node_app(node: Node) -> web.Application:
    """The node's application (api/app.py) with its services started and stopped with it."""
    app = make_app(node)
    app.cleanup_ctx.append(_services)
    member_probe.setup(app)      # after the services: it uses their forwarder
    return app


async def _services(app: web.Application) -> AsyncIterator[None]:
    node = app[NODE]
    loop = asyncio.get_running_loop()
    proposer = node.proposer = Proposer(node.replica, loop, render=present.result,
                                        render_minimal=present.minimal_result)
    forwarder = node.forwarder = Forwarder(node.node_id, ssl=cluster_client_context(node.config))
    await forwarder.start()
    claims = node.claims = ClaimHub(node)
    timer = node.timer = LeaderTimer(node)
    sessions = node.sessions = SessionWatch(node)
    closed = False

    def on_applied(seq: int, wake: bool) -> None:
        if closed:
            return
        node.seqs.on_applied(seq)
        if wake:
            claims.wake()
        timer.state_changed()

    def listener(seq: int, cmds: Sequence[object], results: Sequence[object]) -> None:
        # on the Raft thread, under the lock
        if closed:
            return
        try:
            loop.call_soon_threadsafe(on_applied, seq, enables_claims(cmds))
        except RuntimeError:
            pass  # the loop is closed: the node is stopping

    node.replica.add_apply_listener(listener)
    members.follow_membership(node, loop)
    claims.start()
    timer.start()
    sessions.start()
    yield
    closed = True
    await sessions.close()
    await timer.close()
    await claims.close()
    close = getattr(proposer, "close", None)
    if close is not None:
        result = close()
        if asyncio.iscoroutine(result):
            await result
    await forwarder.close()
