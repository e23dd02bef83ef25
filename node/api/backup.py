"""`GET /v1/cluster/backup`: a consistent snapshot of this shard's state, streamed from its
leader (DESIGN.md section 6.1, `tsctl backup`).

The leader asks Raft for a snapshot (the forked child of every compaction, so the Raft
thread pays only for the fork) and waits until its snapshot file covers the commit index
it had when the request came: every write acknowledged before then is in it. The file
(opened once, so a later compaction's rename cannot change it under the reader) is then
sent as it is, a chunk at a time. A follower relays the leader's answer as a stream.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from ssl import SSLContext
from typing import BinaryIO

import aiohttp
from aiohttp import web

from tsched.node.api import validate
from tsched.node.forwarding import FORWARDED_HEADER
from tsched.node.services import Node, node_of
from tsched.node.errors import ApiError
from tsched.node.raft.snapshot_file import SNAPSHOT_MAGIC, read_open_snapshot_header
from tsched.node.tls import cluster_client_context

log = logging.getLogger("tsched.node.http")
routes = web.RouteTableDef()

BACKUP_PATH = "/v1/cluster/backup"
CHUNK_BYTES = 1 << 20            # what one read of the file, and one write to the socket, holds
SNAPSHOT_WAIT_S = 120.0          # for a snapshot that covers the commit index (a fork's write)
POLL_S = 0.05
RELAY_TIMEOUT_S = 3600.0         # a relayed stream of a large state may take a while
# Answer headers: the cluster's name and shard count, and the section's shard, index, term.
H_CLUSTER, H_SHARDS, H_SHARD = "X-Tsched-Cluster", "X-Tsched-Shards", "X-Tsched-Backup-Shard"
H_INDEX, H_TERM = "X-Tsched-Raft-Index", "X-Tsched-Raft-Term"
PASS_HEADERS = (H_CLUSTER, H_SHARDS, H_SHARD, H_INDEX, H_TERM, "Content-Length")


@routes.get(BACKUP_PATH)
async def backup(request: web.Request) -> web.StreamResponse:
    node = node_of(request)
    validate.query(request.query, ("shard",))
    shard = node.shard or 0
    validate.query_int(request.query, "shard", shard, shard, shard)   # this process's only
    if node.replica.leader_id() != node.node_id or not node.replica.is_ready_leader():
        if request.headers.get(FORWARDED_HEADER):
            raise ApiError("no_leader", "this node is no longer the leader", {"node": node.node_id})
        url = node.leader_url()
        if url is None or node.replica.leader_id() == node.node_id:
            raise ApiError("no_leader", "no leader is known at the moment")
        return await relay_stream(request, url, cluster_client_context(node.config),
                                  {FORWARDED_HEADER: node.node_id})
    if node.backup_in_progress:
        raise ApiError("conflict", "a backup is already being taken on this node; one at a time",
                       {"node": node.node_id})
    node.backup_in_progress = True
    try:
        f, raft = await _covering_snapshot(node, node.replica.commit_index)
        try:
            return await _send_file(request, node, f, raft, shard)
        finally:
            f.close()
    finally:
        node.backup_in_progress = False


async def _covering_snapshot(node: Node, index: int) -> tuple[BinaryIO, list]:
    """This replica's snapshot file, open, once it covers `index` (a snapshot is asked for)."""
    path: Path = node.replica.snapshot_path
    deadline = time.monotonic() + SNAPSHOT_WAIT_S
    while True:
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            f = None
        if f is not None:
            raft = _open_header(f, path)
            if raft is not None and int(raft[0][1]) >= index:   # the last entry applied
                f.seek(0)
                return f, raft
            f.close()
        if time.monotonic() > deadline:
            raise ApiError("timeout", f"no snapshot covering log index {index} within "
                           f"{SNAPSHOT_WAIT_S:.0f} s", {"outcome": "none"})
        node.replica.force_snapshot()
        await asyncio.sleep(POLL_S)


def _open_header(f: BinaryIO, path: Path) -> list | None:
    """pysyncobj's raft data from the open snapshot file's header; None for a file of the
    older format (TSCHSNP1: the next snapshot is asked for)."""
    if f.read(len(SNAPSHOT_MAGIC)) != SNAPSHOT_MAGIC:
        return None
    f.seek(0)
    return read_open_snapshot_header(f, path)["raft"]


async def _send_file(request: web.Request, node: Node, f: BinaryIO, raft: list,
                     shard: int) -> web.StreamResponse:
    size = os.fstat(f.fileno()).st_size
    loop = asyncio.get_running_loop()
    first = await loop.run_in_executor(None, f.read, CHUNK_BYTES)
    resp = web.StreamResponse(headers={
        # A shard process's configuration is its shard's alone: the router names the count.
        "Content-Type": "application/octet-stream", "Content-Length": str(size),
        H_CLUSTER: node.config.name, H_SHARDS: "1", H_SHARD: str(shard),
        H_INDEX: str(int(raft[0][1])), H_TERM: str(int(raft[0][2]))})
    await resp.prepare(request)
    chunk = first
    while chunk:
        await resp.write(chunk)
        chunk = await loop.run_in_executor(None, f.read, CHUNK_BYTES)
    await resp.write_eof()
    return resp


async def relay_stream(request: web.Request, url: str, ssl: SSLContext | None,
                       extra: dict[str, str],
                       answer_headers: dict[str, str] | None = None) -> web.StreamResponse:
    """GET `url` + the request's path and query, and pass the answer on as a stream (a
    stream cut short ends the answer short: its Content-Length tells the client)."""
    headers = dict(extra)
    if "Authorization" in request.headers:
        headers["Authorization"] = request.headers["Authorization"]
    timeout = aiohttp.ClientTimeout(total=RELAY_TIMEOUT_S, sock_connect=5)
    try:
        async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
            async with session.get(url + request.path_qs, headers=headers,
                                   ssl=ssl if ssl is not None else True) as up:
                kept = {k: up.headers[k] for k in PASS_HEADERS if k in up.headers}
                if up.status == 200:
                    kept.update(answer_headers or {})
                resp = web.StreamResponse(status=up.status, headers={
                    "Content-Type": up.headers.get("Content-Type", "application/json"), **kept})
                await resp.prepare(request)
                try:
                    async for chunk in up.content.iter_chunked(CHUNK_BYTES):
                        await resp.write(chunk)
                    await resp.write_eof()
                except (aiohttp.ClientError, TimeoutError, OSError) as e:
                    log.warning("event=backup_relay_cut url=%s error=%s", url, type(e).__name__)
                return resp
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        raise ApiError("unavailable", f"the leader at {url} did not answer the backup: "
                       f"{type(e).__name__}", {"outcome": "none"}) from None
