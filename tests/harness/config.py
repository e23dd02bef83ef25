"""cluster.toml of a local cluster: the product's writer (tsched.client.launcher), which the
tests and the benchmarks share."""
from __future__ import annotations

from tsched.client.launcher import cluster_toml

__all__ = ["cluster_toml"]
