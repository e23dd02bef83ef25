"""The test suite's harness, on the product's local-cluster launcher (tsched.client.launcher,
which `tsctl dev` and the benchmarks' bench/lib/cluster.py run too):

- `ports`: the launcher's `free_port` and checked port blocks of whole clusters
  (`node_addresses`), each pytest-xdist worker's from a slice of the range of its own;
- `config`: `cluster_toml`, the launcher's text of a local cluster's config;
- `cluster`: `Cluster`, real `tsnode` processes through the launcher's `Nodes` (start,
  stop, kill, pause, restart, wait for a leader or an applied seq) and `running`, its
  fixture form;
- `waits`: `wait_until`, the one polling helper (a bound and a message);
- `raft_options`: `FAST`, the one Raft option set of in-process replicas.

Fixtures: tests/conftest.py (a single in-process replica and its API) and
tests/integration/conftest.py (`cluster`, module-scoped, and `fresh_cluster`).
"""
