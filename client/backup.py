"""`tsctl backup FILE` (DESIGN.md section 6.1): every shard's snapshot, streamed from its
leader through any node, into one file in the backup format (statemachine/backup_format.py).

Each section is spooled to a temporary file beside FILE, then the file is put together
(prefix, sections, SHA-256), fsynced and renamed into place: FILE is whole or absent.
"""
from __future__ import annotations

import datetime as _dt
import os
import ssl
import tempfile
import time
from typing import NoReturn

import httpx

import tsched.statemachine.backup_format as fmt

from .errors import ApiError, Unavailable

BACKUP_PATH = "/v1/cluster/backup"
CHUNK_BYTES = 1 << 20
READ_TIMEOUT_S = 180.0     # a node may wait up to 120 s for its snapshot before the first byte


def take_backup(urls: list[str], token: str | None, path: str,
                ca_file: str | None = None, timeout_s: float = 15.0) -> dict:
    """Write the backup to `path`; its head."""
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    where = os.path.dirname(os.path.abspath(path))
    with httpx.Client(verify=verify, headers=headers,
                      timeout=httpx.Timeout(READ_TIMEOUT_S, connect=5.0)) as http, \
            tempfile.TemporaryDirectory(dir=where, prefix=".tsctl-backup-") as spool:
        first = _fetch(http, urls, 0, os.path.join(spool, "0"), timeout_s)
        cluster, shards = first["cluster"], first["shards"]
        sections = [first]
        for s in range(1, shards):
            sec = _fetch(http, urls, s, os.path.join(spool, str(s)), timeout_s)
            if sec["cluster"] != cluster:
                raise ApiError("conflict", f"shard {s} answered for cluster {sec['cluster']!r}, "
                               f"shard 0 for {cluster!r}")
            sections.append(sec)
        now = time.time()
        head = {"cluster": cluster, "shards": shards, "created_ms": int(now * 1000),
                "created_at": _dt.datetime.fromtimestamp(now, _dt.timezone.utc)
                .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "sections": [{k: sec[k] for k in ("shard", "bytes", "raft_index", "raft_term")}
                             for sec in sections]}
        _assemble(path, head, [sec["file"] for sec in sections])
    return head


def _fetch(http: httpx.Client, urls: list[str], shard: int, spool: str, timeout_s: float) -> dict:
    """Stream one shard's section into `spool`, from the first node that answers; trying
    the nodes again (no leader yet, a node down) until `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    last = "no node was asked"
    while True:
        for url in urls:
            try:
                return _fetch_from(http, url, shard, spool)
            except (httpx.TransportError, _Retry) as exc:
                last = f"{url}: {exc}"
        if time.monotonic() > deadline:
            raise Unavailable(f"no node gave shard {shard}'s backup: {last}")
        time.sleep(0.2)


class _Retry(Exception):
    """An answer worth asking again (no leader, unavailable, a stream cut short)."""


def _fetch_from(http: httpx.Client, url: str, shard: int, spool: str) -> dict:
    with http.stream("GET", f"{url}{BACKUP_PATH}", params={"shard": shard}) as resp:
        if resp.status_code != 200:
            resp.read()
            _raise_error(resp)
        size = int(resp.headers["Content-Length"])
        got = 0
        with open(spool, "wb") as f:
            for chunk in resp.iter_bytes(CHUNK_BYTES):
                f.write(chunk)
                got += len(chunk)
        if got != size:
            raise _Retry(f"the stream ended after {got} of {size} bytes")
        h = resp.headers
        return {"cluster": h["X-Tsched-Cluster"], "shards": int(h["X-Tsched-Shards"]),
                "shard": int(h["X-Tsched-Backup-Shard"]), "bytes": size,
                "raft_index": int(h["X-Tsched-Raft-Index"]),
                "raft_term": int(h["X-Tsched-Raft-Term"]), "file": spool}


def _raise_error(resp: httpx.Response) -> NoReturn:
    try:
        err = resp.json()["error"]
        code, message = err["code"], err.get("message", "")
    except (ValueError, KeyError, TypeError):
        code, message = "unavailable", f"HTTP {resp.status_code}"
    if code in ("no_leader", "unavailable") or resp.status_code in (502, 503):
        raise _Retry(f"{code}: {message}")
    raise ApiError(code, message, status=resp.status_code)


def _assemble(path: str, head: dict, files: list[str]) -> None:
    h = fmt.new_hash()
    tmp = path + ".tmp"
    with open(tmp, "wb") as out:
        prefix = fmt.encode_prefix(head)
        out.write(prefix)
        h.update(prefix)
        for name in files:
            with open(name, "rb") as f:
                while chunk := f.read(CHUNK_BYTES):
                    out.write(chunk)
                    h.update(chunk)
        out.write(h.digest())
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
