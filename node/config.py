"""cluster.toml -> frozen configuration objects (DESIGN.md section 8).

The file lists the cluster once; every node reads the same file and picks itself by id.
Paths (`data_dir`) are relative to the file's folder so a checked-in file works anywhere.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from tsched.statemachine.limits import API_LIMITS
from tsched.statemachine.tiers import DEFAULT_TIERS, Tier, TierError, parse_tiers

# A TOML table as tomllib reads it; each value is narrowed with isinstance where it is parsed.
Table = Mapping[str, object]

# --- the shape of a sharded cluster (DESIGN.md section 13): how many shards and replicas it
# may have, which nodes hold each shard, and how far apart a node's shard ports are.

SHARDS_MAX = 64
REPLICA_CHOICES = (3, 5)
REPLICAS_MAX = 5
# Shard s of a node listens on its base Raft port + 100 * s, so nodes of one host with
# consecutive base ports never collide; its internal HTTP API (routers reach it there) is
# 50 above that Raft port.
SHARD_PORT_STEP = 100
SHARD_HTTP_OFFSET = 50
PORT_MAX = 65535


def internal_http(shard_raft: str) -> str:
    """A shard replica's internal HTTP address, from its Raft address (always 50 above)."""
    host, _, port = shard_raft.rpartition(":")
    return f"{host}:{int(port) + SHARD_HTTP_OFFSET}"


def is_full_placement(cfg: ClusterConfig) -> bool:
    """Every node holds every shard: the layout whose nodes can change while it runs."""
    return replicas_of(cfg) == len(cfg.nodes)


def replicas_of(cfg: ClusterConfig) -> int:
    """R: the configured value, else the number of nodes (at most 5 when there are several
    shards; a single group keeps every node, as before shards)."""
    r = getattr(cfg, "replicas", None)
    if r is not None:
        return r
    n = len(cfg.nodes)
    return n if shards_of(cfg) == 1 else min(n, REPLICAS_MAX)


def shards_of(cfg: ClusterConfig) -> int:
    return getattr(cfg, "shards", 1) or 1


def is_single_group(cfg: ClusterConfig) -> bool:
    """One shard on every node: the node is today's node, with no supervisor or router
    in front of it (no extra process hop on the hot path)."""
    return shards_of(cfg) == 1 and replicas_of(cfg) == len(cfg.nodes)


def placement(cfg: ClusterConfig, shard: int) -> tuple[NodeConfig, ...]:
    """The R nodes of `shard`: in config order from node `shard mod N`, wrapping."""
    n = len(cfg.nodes)
    return tuple(cfg.nodes[(shard + i) % n] for i in range(replicas_of(cfg)))


NODE_ID_LEN_MAX = 64
NODES_MAX = 9
# Timeouts an operator may tune under [cluster.timeouts]; values in seconds.
# `unclaimed_hint_s`: how long no worker may have asked for a task type before a pending
# task of it carries the hint (node/scheduling/claimed_types.py; default 120 s).
TIMEOUT_KEYS = ("raft_min_s", "raft_max_s", "propose_s", "leader_fallback_s", "unclaimed_hint_s")
# Log compaction under [cluster.compaction]: a snapshot is taken every `min_entries` log
# entries and every `min_time_s` seconds, and once the log holds `min_bytes` bytes of
# applied commands, each node in its own phase (`raft.Replica.compaction_phase`).
# Bounds keep a typo from snapshotting on every entry or never.
COMPACTION_BOUNDS = {"min_entries": (10, 10_000_000), "min_time_s": (1.0, 86_400.0),
                     "min_bytes": (1 << 16, 1 << 36)}


class ConfigError(ValueError):
    """The configuration is unusable; the message says where and why."""


@dataclass(frozen=True)
class NodeConfig:
    id: str
    raft: str        # host:port of the Raft transport
    http: str        # host:port of the HTTP API
    data_dir: str    # absolute path
    tls_cert: str | None = None   # PEM certificate (absolute path): the node serves HTTPS
    tls_key: str | None = None    # its PEM private key
    # A shard replica's `http` is its internal address; `api` is then its node's public API
    # (what the shard group's membership records: DESIGN.md section 6.2).
    api: str | None = None

    @property
    def http_host(self) -> str:
        return split_address(self.http, "http")[0]

    @property
    def http_port(self) -> int:
        return split_address(self.http, "http")[1]

    @property
    def url(self) -> str:
        return f"{'https' if self.tls_cert else 'http'}://{self.http}"


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    nodes: tuple[NodeConfig, ...]
    secret: str | None = None
    timeouts: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    compaction: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    auth: Table | None = None                   # kept for the auth layer (api/auth.parse)
    # kept for state machine limits: `Limits(**limits)` checks the values (node/assembly.py)
    limits: Mapping[str, Any] | None = None
    # [archive] dir, relative to each node's data_dir; a file without [archive] archives
    # under "archive" (parse), a config built in code only when it says so
    archive_dir: str | None = None
    archive_keep_days: int = 365     # [archive] keep_days: older day files are removed
    path: str | None = None
    ca_file: str | None = None   # CA bundle (absolute path) for HTTPS between nodes
    shards: int = 1              # Raft groups (DESIGN.md section 13); fixed for life
    replicas: int | None = None  # nodes per shard; None: see shards.replicas_of
    tiers: tuple[Tier, ...] = DEFAULT_TIERS   # [[priority.tiers]] (DESIGN 5.1)
    # [limits] list_pages_per_s and list_burst_pages: this node's budget of listing pages
    # (node/api/read_budget.py); node-local, not state machine limits
    list_pages_per_s: int = API_LIMITS.list_pages_per_s
    list_burst_pages: int = API_LIMITS.list_burst_pages

    def node(self, node_id: str) -> NodeConfig:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise ConfigError(f"node id {node_id!r} is not in the cluster "
                          f"(known: {', '.join(n.id for n in self.nodes)})")

    def peers_of(self, node_id: str) -> dict[str, str]:
        """Raft addresses of every other node, by id."""
        self.node(node_id)
        return {n.id: n.raft for n in self.nodes if n.id != node_id}


def split_address(addr: str, what: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{what} address {addr!r} must be host:port")
    return host, int(port)


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1", "[::1]") or host.startswith("127.")


def load(path: str) -> ClusterConfig:
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path!r} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    base = os.path.dirname(os.path.abspath(path))
    return parse(doc, base_dir=base, path=os.path.abspath(path))


# `[limits] request_window_s`: how long a retried write is applied once (DESIGN 6, 8); the
# state machine's `Limits.request_window_ms`. At least the client's 30 s retry horizon.
REQUEST_WINDOW_S_BOUNDS = (30.0, 86_400.0)


def _limits(table: Table) -> dict[str, object]:
    """`[limits]` as `Limits` fields: `request_window_s` becomes `request_window_ms`; the
    other keys are `Limits` field names already (node/assembly.py builds them)."""
    out = dict(table)
    if "request_window_s" in out:
        value = out.pop("request_window_s")
        low, high = REQUEST_WINDOW_S_BOUNDS
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not low <= value <= high:
            raise ConfigError(f"[limits] request_window_s must be a number of seconds in "
                              f"[{low:g}, {high:g}], not {value!r}")
        out["request_window_ms"] = round(value * 1000)
    return out


# `[archive]` (DESIGN 14.3). A cluster file without the table archives under each node's
# data_dir: a completed task must outlive its retention somewhere unless the operator says
# otherwise (`enabled = false`). Day files older than keep_days are removed: a year by
# default, at most a century (ship them elsewhere for longer, docs/operations.md).
ARCHIVE_DIR_DEFAULT = "archive"
ARCHIVE_KEEP_DAYS_DEFAULT = 365
ARCHIVE_KEEP_DAYS_BOUNDS = (1, 36_500)


# `[limits] list_pages_per_s` / `list_burst_pages`: a node's budget of listing pages
# (node/api/read_budget.py, DESIGN 7). At least 1 page a second (0: no budget), so a client
# reading one page after another always gets its next one within the 1 s wait.
LIST_PAGES_PER_S_BOUNDS = (1, 100_000)
LIST_BURST_PAGES_BOUNDS = (1, 100_000)


def _list_budget(table: dict[str, object] | None) -> dict[str, int]:
    """The listing budget's keys of `[limits]` (taken out of it: they are the node's, not
    the state machine's), checked; the defaults where absent."""
    out = {"list_pages_per_s": API_LIMITS.list_pages_per_s,
           "list_burst_pages": API_LIMITS.list_burst_pages}
    for key, (low, high) in (("list_pages_per_s", LIST_PAGES_PER_S_BOUNDS),
                             ("list_burst_pages", LIST_BURST_PAGES_BOUNDS)):
        if table is None or key not in table:
            continue
        value = table.pop(key)
        off = key == "list_pages_per_s" and value == 0
        if isinstance(value, bool) or not isinstance(value, int) \
                or not (off or low <= value <= high):
            raise ConfigError(f"[limits] {key} must be an integer in [{low}, {high:,}]"
                              + (" or 0 (no budget)" if key == "list_pages_per_s" else "")
                              + f", not {value!r}")
        out[key] = value
    return out


def _archive(table: object) -> tuple[str | None, int]:
    """`[archive]` as (dir or None when disabled, keep_days)."""
    if table is None:
        return ARCHIVE_DIR_DEFAULT, ARCHIVE_KEEP_DAYS_DEFAULT
    if not isinstance(table, dict):
        raise ConfigError("[archive] must be a table")
    extra = sorted(set(table) - {"dir", "enabled", "keep_days"})
    if extra:
        raise ConfigError(f"[archive] unknown keys: {', '.join(extra)}")
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError("[archive] enabled must be true or false")
    value = table.get("dir", ARCHIVE_DIR_DEFAULT)
    if not isinstance(value, str) or not value:
        raise ConfigError("[archive] dir must be a non-empty path")
    keep = table.get("keep_days", ARCHIVE_KEEP_DAYS_DEFAULT)
    low, high = ARCHIVE_KEEP_DAYS_BOUNDS
    if isinstance(keep, bool) or not isinstance(keep, int) or not low <= keep <= high:
        raise ConfigError(f"[archive] keep_days must be a whole number of days in "
                          f"[{low}, {high}], not {keep!r}")
    return (value if enabled else None), keep


def _tiers(table: object) -> tuple[Tier, ...]:
    """`[priority]` with `[[priority.tiers]]` (DESIGN 5.1); no table: the default five."""
    if table is None:
        return DEFAULT_TIERS
    if not isinstance(table, dict) or set(table) - {"tiers"}:
        raise ConfigError("[priority] must be a table whose only key is tiers")
    try:
        return parse_tiers(table.get("tiers"))
    except TierError as e:
        raise ConfigError(str(e)) from None


def parse(doc: Table, *, base_dir: str, path: str | None = None) -> ClusterConfig:
    unknown = sorted(set(doc) - {"cluster", "node", "auth", "limits", "archive", "priority"})
    if unknown:
        raise ConfigError(f"unknown top-level keys: {', '.join(unknown)}")
    cluster = _table(doc, "cluster", "[cluster]")
    name = _str(cluster, "name", "[cluster]")
    secret = cluster.get("secret")
    if secret is not None and (not isinstance(secret, str) or not secret):
        raise ConfigError("[cluster] secret must be a non-empty string")
    extra = sorted(set(cluster) - {"name", "secret", "timeouts", "compaction", "ca_file",
                                   "shards", "replicas"})
    if extra:
        raise ConfigError(f"[cluster] unknown keys: {', '.join(extra)}")
    nodes = _nodes(doc.get("node"), base_dir)
    auth, table = _optional_table(doc, "auth"), _optional_table(doc, "limits")
    limits = dict(table) if table is not None else None
    budget = _list_budget(limits)
    archive_dir, keep_days = _archive(doc.get("archive"))
    cfg = ClusterConfig(
        name=name, nodes=nodes, secret=secret,
        timeouts=MappingProxyType(_timeouts(cluster.get("timeouts"))),
        compaction=MappingProxyType(_compaction(cluster.get("compaction"))),
        auth=MappingProxyType(auth) if auth is not None else None,
        limits=MappingProxyType(_limits(limits)) if limits is not None else None,
        archive_dir=archive_dir, archive_keep_days=keep_days,
        path=path, ca_file=_path(cluster, "ca_file", "[cluster]", base_dir),
        shards=_shards(cluster), replicas=_replicas(cluster),
        tiers=_tiers(doc.get("priority")), **budget)
    _check_raft_security(cfg)
    check_shape(cfg)
    return cfg


def _optional_table(doc: Table, key: str) -> Table | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, dict):
        raise ConfigError(f"[{key}] must be a table")
    return value


def check_shape(cfg: ClusterConfig) -> None:
    """`replicas` fits the nodes, and every port a shard uses exists and is used once per
    host. Raises ConfigError naming the field."""
    s, n = shards_of(cfg), len(cfg.nodes)
    if cfg.replicas is not None and cfg.replicas > n:
        raise ConfigError(f"[cluster] replicas = {cfg.replicas} is more than the "
                          f"{n} nodes of the cluster")
    if s == 1 and replicas_of(cfg) == n:
        return           # today's single group: its addresses are checked as ever
    seen: dict[tuple[str, int], str] = {}
    for node in cfg.nodes:
        host, _ = split_address(node.http, "http")
        seen[(host, split_address(node.http, "http")[1])] = f"node {node.id} http"
    for shard in range(s):
        for node in placement(cfg, shard):
            for what, addr in (("raft", _unchecked(node.raft, shard, 0)),
                               ("internal http", _unchecked(node.raft, shard,
                                                            SHARD_HTTP_OFFSET))):
                host, port = addr
                if port > PORT_MAX:
                    raise ConfigError(
                        f"[cluster] shards = {s}: node {node.id}'s shard {shard} {what} port "
                        f"{port} is above {PORT_MAX}; lower the node's raft port")
                key = (host, port)
                if key in seen:
                    raise ConfigError(f"[cluster] shards = {s}: node {node.id}'s shard {shard} "
                                      f"{what} port {host}:{port} is also {seen[key]}")
                seen[key] = f"node {node.id} shard {shard} {what}"


def _unchecked(raft: str, shard: int, offset: int) -> tuple[str, int]:
    host, port = split_address(raft, "raft")
    return host, port + SHARD_PORT_STEP * shard + offset


def _shards(cluster: Table) -> int:
    value = cluster.get("shards", 1)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= SHARDS_MAX:
        raise ConfigError(f"[cluster] shards must be an integer in 1..{SHARDS_MAX}, "
                          f"got {value!r}")
    return value


def _replicas(cluster: Table) -> int | None:
    value = cluster.get("replicas")
    if value is None:
        return None
    if isinstance(value, bool) or value not in REPLICA_CHOICES:
        raise ConfigError(f"[cluster] replicas must be one of "
                          f"{', '.join(map(str, REPLICA_CHOICES))}, got {value!r}")
    return value


def _nodes(raw: object, base_dir: str) -> tuple[NodeConfig, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError("at least one [[node]] table is required")
    if len(raw) > NODES_MAX:
        raise ConfigError(f"at most {NODES_MAX} nodes are supported, got {len(raw)}")
    nodes = [_node(t, i, base_dir) for i, t in enumerate(raw)]
    for attr in ("id", "raft", "http", "data_dir"):
        values = [getattr(n, attr) for n in nodes]
        dups = sorted({v for v in values if values.count(v) > 1})
        if dups:
            raise ConfigError(f"[[node]] {attr} must be unique; repeated: {', '.join(dups)}")
    return tuple(nodes)


def _node(t: object, index: int, base_dir: str) -> NodeConfig:
    where = f"[[node]] #{index + 1}"
    if not isinstance(t, dict):
        raise ConfigError(f"{where} must be a table")
    extra = sorted(set(t) - {"id", "raft", "http", "data_dir", "tls_cert", "tls_key"})
    if extra:
        raise ConfigError(f"{where}: unknown keys: {', '.join(extra)}")
    node_id = _str(t, "id", where)
    if len(node_id) > NODE_ID_LEN_MAX or not node_id.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"{where}: id {node_id!r} must be 1..{NODE_ID_LEN_MAX} letters, "
                          "digits, '-' or '_'")
    raft, http = _str(t, "raft", where), _str(t, "http", where)
    split_address(raft, f"{where} raft")
    split_address(http, f"{where} http")
    data_dir = os.path.normpath(os.path.join(base_dir, _str(t, "data_dir", where)))
    cert, key = _path(t, "tls_cert", where, base_dir), _path(t, "tls_key", where, base_dir)
    if (cert is None) != (key is None):
        raise ConfigError(f"{where}: tls_cert and tls_key go together (HTTPS needs both)")
    return NodeConfig(id=node_id, raft=raft, http=http, data_dir=data_dir, tls_cert=cert,
                      tls_key=key)


def _path(t: Table, key: str, where: str, base_dir: str) -> str | None:
    """An optional file path, relative to the config file's folder."""
    if key not in t:
        return None
    return os.path.normpath(os.path.join(base_dir, _str(t, key, where)))


def _timeouts(raw: object) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("[cluster.timeouts] must be a table")
    out: dict[str, float] = {}
    for key, value in raw.items():
        if key not in TIMEOUT_KEYS:
            raise ConfigError(f"[cluster.timeouts] unknown key {key!r} "
                              f"(known: {', '.join(TIMEOUT_KEYS)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 600:
            raise ConfigError(f"[cluster.timeouts] {key} must be a number of seconds in (0, 600]")
        out[key] = float(value)
    return out


def _compaction(raw: object) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("[cluster.compaction] must be a table")
    out: dict[str, float] = {}
    for key, value in raw.items():
        if key not in COMPACTION_BOUNDS:
            raise ConfigError(f"[cluster.compaction] unknown key {key!r} "
                              f"(known: {', '.join(COMPACTION_BOUNDS)})")
        low, high = COMPACTION_BOUNDS[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not low <= value <= high:
            raise ConfigError(f"[cluster.compaction] {key} must be a number in [{low}, {high}]")
        out[key] = value
    return out


def _check_raft_security(cfg: ClusterConfig) -> None:
    # Raft messages are pickles: an open Raft port runs anyone's code (DESIGN.md section 6).
    if cfg.secret:
        return
    exposed = [n.id for n in cfg.nodes if not is_loopback(split_address(n.raft, "raft")[0])]
    if exposed:
        raise ConfigError(f"nodes {', '.join(exposed)} have non-loopback raft addresses: "
                          "set [cluster] secret (and keep the Raft network private)")


def _table(doc: Table, key: str, where: str) -> Table:
    t = doc.get(key)
    if not isinstance(t, dict):
        raise ConfigError(f"{where} table is required")
    return t


def _str(t: Table, key: str, where: str) -> str:
    v = t.get(key)
    if not isinstance(v, str) or not v:
        raise ConfigError(f"{where}: {key} must be a non-empty string")
    return v
