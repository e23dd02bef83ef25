"""The test suite's harness, shared with the benchmarks (bench/lib/cluster.py):

- `ports`: `free_port`, and checked port blocks of whole clusters (`node_addresses`);
- `config`: `cluster_toml`, the text of a local cluster's config;
- `cluster`: `Cluster`, real `tsnode` processes (start, stop, kill, pause, restart, wait
  for a leader or an applied seq) and `running`, its fixture form;
- `waits`: `wait_until`, the one polling helper (a bound and a message);
- `raft_options`: `FAST`, the one Raft option set of in-process replicas.

Fixtures: tests/conftest.py (a single in-process replica and its API) and
tests/integration/conftest.py (`cluster`, module-scoped, and `fresh_cluster`).
"""
