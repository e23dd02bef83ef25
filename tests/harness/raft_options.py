"""The one Raft option set of in-process replicas in tests (tests/conftest.py's single
node, the Raft tests' trios): short election timeouts, so a test waits a fraction of a
second for an election, not the node's default seconds."""
from __future__ import annotations

from tsched.node.raft.replica import RaftOptions

# Long enough that three replicas in one process on a busy 2-core machine do not time each
# other out between heartbeats. No fsync: the tests kill processes, never the machine, so
# the OS keeps every write (the production setting has its own bench, test_raft_bench.py).
FAST = RaftOptions(raft_min_timeout_s=0.4, raft_max_timeout_s=0.8, leader_fallback_timeout_s=0.4,
                   connection_retry_s=0.2, connection_timeout_s=1.0, fsync=False)
