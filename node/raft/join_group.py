"""Membership at start-up (DESIGN.md section 6.2): the membership a node recorded beside its
log against the config's [[node]] list, and `tsnode --join URL`.

A node's data dir holds `members.json`, the membership of its log. On start the config's
[[node]] list must name the same members (ids and both addresses), or only this node (a node
that joined a cluster keeps a file with itself alone), or differ by the one member of a
change (logged); otherwise the node stops (exit 2) naming both lists. It starts with the
recorded members. A node that is no longer a member never starts with its old data.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import urllib.error
from collections.abc import Callable
import urllib.request
from pathlib import Path
from ssl import SSLContext
from typing import cast

from tsched.node.config import ClusterConfig, ConfigError, NodeConfig
from tsched.node.raft.membership import Member, at_replicas, describe, nodes_for, read_members

log = logging.getLogger("tsched.node")

JOIN_TIMEOUT_S = 30.0
NAMED_POLL_S = 0.5      # while an add is in flight: does the leader's log name us yet?


def listed(cfg: ClusterConfig) -> list[Member]:
    return sorted(Member(n.id, n.raft, n.http) for n in cfg.nodes)


def effective_config(cfg: ClusterConfig, me: NodeConfig, sharded: bool = False) -> ClusterConfig:
    """`cfg` with the membership recorded in the node's data dir (unchanged when none is).
    `sharded`: `me` is a shard replica (with_members)."""
    recorded = recorded_members(Path(me.data_dir))
    if recorded is None:
        return cfg
    return with_members(cfg, me, recorded, f"the membership recorded in {me.data_dir}",
                        sharded)


def with_members(cfg: ClusterConfig, me: NodeConfig, members: list[Member],
                 where: str, sharded: bool = False) -> ClusterConfig:
    """`sharded`: `members` are a shard group's, whose `http` is their node's public API;
    compared by id and Raft address (a replica's internal HTTP follows from the latter)."""
    raw = members
    if sharded:
        members = at_replicas(members)
    mine = next((m for m in members if m.id == me.id), None)
    if mine is None:
        raise ConfigError(
            f"node {me.id} is not a member of the cluster ({where}: {describe(members)}): it "
            "was removed and cannot rejoin with its old data; start a new node with an empty "
            "data dir and --join")
    if (mine.raft, mine.http) != (me.raft, me.http):
        raise ConfigError(f"node {me.id}: the config gives raft {me.raft}, http {me.http}; "
                          f"{where} gives raft {mine.raft}, http {mine.http}")
    if len(cfg.nodes) > 1 and listed(cfg) != sorted(members):
        mismatch = (f"the config's [[node]] list ({describe(listed(cfg))}) disagrees with "
                    f"{where} ({describe(members)})")
        if not one_change_apart(listed(cfg), members):
            raise ConfigError(f"node {me.id}: {mismatch}; list the members in the file (or "
                              "only this node); members change through POST/DELETE "
                              "/v1/cluster/members")
        log.warning("event=members_file_one_change_apart node=%s %s: starting with the "
                    "recorded members (a change this node has not seen yet, or a file not "
                    "updated yet); update the file", me.id, mismatch)
    return dataclasses.replace(cfg, nodes=nodes_for(cfg, me.id, raw, sharded))


def one_change_apart(a: list[Member], b: list[Member]) -> bool:
    """`a` and `b` differ by one member added or removed, the others alike: the state of a
    node that was down during a change (or a file not updated yet), which Raft's one
    change at a time makes normal."""
    sa, sb = set(a), set(b)
    return len(sa ^ sb) == 1


def join(cfg: ClusterConfig, me: NodeConfig, url: str, token: str | None,
         ssl_context: SSLContext | None = None) -> ClusterConfig:
    """`--join URL`: the membership from a member's API, this node added first when it is
    not a member yet (the admin token, when the cluster has [auth]); `cfg` with it."""
    recorded = _recorded_or_empty(me)
    members = members_of(call(url, "GET", "/v1/cluster/members", None, token, ssl_context))
    where = f"the cluster's membership at {url}"
    if recorded is not None:      # a restart: still a member?
        return with_members(cfg, me, members, where)
    if not any(m.id == me.id for m in members):
        members = ask_to_be_added(cfg, me, url, token, ssl_context)
    return with_members(cfg, me, members, where)


def recorded_members(data_dir: Path) -> list[Member] | None:
    """read_members, its ValueError (an unreadable file) as the ConfigError that stops
    the node."""
    try:
        return read_members(data_dir)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def refuse_other_life(data_dir: Path) -> None:
    """A joining node starts empty: data without recorded members is another cluster
    life's."""
    if has_data(data_dir):
        raise ConfigError(f"--join: data dir {data_dir} holds data of another cluster "
                          "life; a joining node starts with an empty data dir")


def _recorded_or_empty(me: NodeConfig) -> list[Member] | None:
    """The members a joining node recorded (a restart), or None for an empty data dir."""
    recorded = recorded_members(Path(me.data_dir))
    if recorded is None:
        refuse_other_life(Path(me.data_dir))
    return recorded


def ask_to_be_added(cfg: ClusterConfig, me: NodeConfig, url: str, token: str | None,
                    ssl_context: SSLContext | None) -> list[Member]:
    """POST this node; an add whose commit needs this very node (a cluster with a dead
    member: the new one counts in the quorum at once) times out: then the node goes on
    once the leader's log names it, and its own start commits the change."""
    body = {"id": me.id, "raft": me.raft, "http": me.http}

    def naming() -> list[Member] | None:
        try:
            members = members_of(call(url, "GET", "/v1/cluster/members", None, token,
                                      ssl_context))
        except ConfigError:
            return None
        return members if any(m.id == me.id for m in members) else None
    try:
        return add_or_named(url, body, token, ssl_context, naming)
    except _Unanswered:
        pass
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while True:
        members = members_of(call(url, "GET", "/v1/cluster/members", None, token, ssl_context))
        if any(m.id == me.id for m in members):
            return members
        if time.monotonic() > deadline:
            raise ConfigError(f"--join: {url} did not add node {me.id} within "
                              f"{JOIN_TIMEOUT_S:.0f} s (members: {describe(members)})")
        time.sleep(0.5)


def add_or_named(url: str, body: dict[str, str], token: str | None,
                 ssl_context: SSLContext | None,
                 named: Callable[[], list[Member] | None]) -> list[Member]:
    """POST the add `body` and return the members it answers, or sooner what `named()`
    returns once it is not None (the leader's log names this node). An add whose commit
    needs this very node (a cluster with a dead member: the new one counts in the quorum at
    once) is answered only when the leader gives up waiting for the commit (10 s), while
    the node's own start is what commits it; so the POST runs in a thread of its own and
    `named` is asked every NAMED_POLL_S meanwhile. A POST left running ends with its own
    timeout; its answer no longer matters. The POST's failure is raised as it was."""
    answer: list[list[Member] | ConfigError] = []
    done = threading.Event()

    def post() -> None:
        try:
            answer.append(members_of(call(url, "POST", "/v1/cluster/members", body, token,
                                          ssl_context)))
        except ConfigError as e:
            answer.append(e)
        finally:
            done.set()
    threading.Thread(target=post, name="join-add", daemon=True).start()
    while not done.wait(NAMED_POLL_S):
        members = named()
        if members is not None:
            return members
    if isinstance(answer[0], ConfigError):
        raise answer[0]
    return answer[0]


def join_shard(cfg: ClusterConfig, me: NodeConfig, url: str, shard: int, token: str | None,
               ssl_context: SSLContext | None = None) -> ClusterConfig:
    """`--join URL` in a shard replica's process: its node's supervisor had the node added
    (shards/join_all_groups.py); the shard group's members from `GET /v1/cluster/members?shard=s`,
    once they name this node (a shard's change may commit after another's)."""
    recorded = _recorded_or_empty(me)
    path = f"/v1/cluster/members?shard={shard}"
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    failure: ConfigError | None = None
    while True:
        try:
            members = members_of(call(url, "GET", path, None, token, ssl_context))
        except ConfigError as e:     # its router not up yet, or no replica answering
            members, failure = [], e
        else:
            failure = None
            if recorded is not None or any(m.id == me.id for m in members):
                break
        if time.monotonic() > deadline:
            raise failure or ConfigError(
                f"--join: shard {shard} at {url} does not name node {me.id} after "
                f"{JOIN_TIMEOUT_S:.0f} s (members: {describe(members)})")
        time.sleep(0.5)
    return with_members(cfg, me, members, f"shard {shard}'s membership at {url}", sharded=True)


class CallFailed(ConfigError):
    """A request to the cluster failed: `status` (None: no answer) and the error's
    `details.reason`, when it had one."""

    def __init__(self, message: str, status: int | None = None,
                 reason: str | None = None) -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


class _Unanswered(CallFailed):
    """503 or 504: no outcome (the change may still be in the log)."""


def has_data(data_dir: Path) -> bool:
    return data_dir.exists() and any(data_dir.iterdir())


def members_of(doc: object) -> list[Member]:
    """The members of a `/v1/cluster/members` answer: JSON of any shape, where a wrong one
    raises KeyError or TypeError (the cast only names the shape expected)."""
    try:
        return sorted(Member(str(m["id"]), str(m["raft"]), str(m["http"]))
                      for m in cast(dict, doc)["members"])
    except (KeyError, TypeError) as e:
        raise ConfigError(f"--join: the cluster answered no member list ({e!r})") from None


def call(url: str, method: str, path: str, body: dict[str, str] | None, token: str | None,
         ssl_context: SSLContext | None) -> object:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method=method,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=JOIN_TIMEOUT_S, context=ssl_context) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        detail = e.read()[:500].decode(errors="replace")
        kind = _Unanswered if e.code in (503, 504) else CallFailed
        raise kind(f"--join: {method} {url}{path} answered {e.code}: {detail}", e.code,
                   _reason(detail)) from None
    except (OSError, ValueError) as e:
        raise CallFailed(f"--join: {method} {url}{path} failed: {e}") from None


def _reason(detail: str) -> str | None:
    try:
        reason = json.loads(detail)["error"]["details"]["reason"]
    except (ValueError, KeyError, TypeError):
        return None
    return reason if isinstance(reason, str) else None
