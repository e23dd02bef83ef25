"""The one fast Raft option set of the tests: in-process replicas (tests/conftest.py's single
node, the Raft tests' trios) use it as it is, `tsnode` clusters (harness `Cluster`) get its
election timeouts in their cluster.toml. A test waits a fraction of a second for an
election, not the node's default seconds; tests about those timeouts opt out."""
from __future__ import annotations

from tsched.node.raft.replica import RaftOptions

# Long enough that three replicas in one process on a busy 2-core machine do not time each
# other out between heartbeats. No fsync: the tests kill processes, never the machine, so
# the OS keeps every write (the production setting has its own bench, test_raft_bench.py).
FAST = RaftOptions(raft_min_timeout_s=0.4, raft_max_timeout_s=0.8, leader_fallback_timeout_s=0.4,
                   connection_retry_s=0.2, connection_timeout_s=1.0, fsync=False)


def timeouts_toml(options: RaftOptions = FAST) -> str:
    """[cluster.timeouts] giving `tsnode` processes the same election timeouts (the
    harness's `Cluster` adds it unless told `fast_raft=False`)."""
    return ("\n[cluster.timeouts]\n"
            f"raft_min_s = {options.raft_min_timeout_s}\n"
            f"raft_max_s = {options.raft_max_timeout_s}\n"
            f"leader_fallback_s = {options.leader_fallback_timeout_s}\n")
