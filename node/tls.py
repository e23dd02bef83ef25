"""TLS for the HTTP API (optional; SECURITY.md).

A node serves HTTPS when its `[[node]]` table names `tls_cert` and `tls_key` (PEM files).
Nodes talk to each other's HTTP API (claims and linearizable reads forwarded to the leader,
cluster status) and verify those certificates against `[cluster] ca_file` when it is set,
else against the system's trust store. The Raft port is not covered here: it is protected
by `cluster.secret` and a private network (DESIGN.md section 6).
"""
from __future__ import annotations

import ssl

from tsched.node.config import ClusterConfig, ConfigError, NodeConfig

TLS_VERSION_MIN = ssl.TLSVersion.TLSv1_2


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """The context a node serves HTTPS with; ConfigError naming the file when unusable."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = TLS_VERSION_MIN
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except FileNotFoundError as e:
        raise ConfigError(f"TLS file {e.filename or cert_file!r} does not exist") from None
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"tls_cert {cert_file!r} / tls_key {key_file!r} are not a usable "
                          f"PEM certificate and key: {e}") from None
    return ctx


def client_context(ca_file: str | None) -> ssl.SSLContext:
    """The context for HTTPS requests to other nodes: verified against ca_file if given."""
    try:
        ctx = ssl.create_default_context(cafile=ca_file)
    except FileNotFoundError:
        raise ConfigError(f"ca_file {ca_file!r} does not exist") from None
    except (ssl.SSLError, OSError) as e:
        raise ConfigError(f"ca_file {ca_file!r} is not a usable PEM CA bundle: {e}") from None
    ctx.minimum_version = TLS_VERSION_MIN
    return ctx


def node_server_context(node: NodeConfig) -> ssl.SSLContext | None:
    """For a `config.NodeConfig`: its server context, or None when it serves plain HTTP."""
    cert, key = getattr(node, "tls_cert", None), getattr(node, "tls_key", None)
    if not cert:
        return None
    assert key is not None, "config.py accepts tls_cert only together with tls_key"
    return server_context(cert, key)


def cluster_client_context(cluster: ClusterConfig) -> ssl.SSLContext | None:
    """For a `config.ClusterConfig`: the context for node-to-node HTTPS, or None when no
    node serves TLS (plain HTTP needs none)."""
    if not any(getattr(n, "tls_cert", None) for n in cluster.nodes):
        return None
    return client_context(getattr(cluster, "ca_file", None))
