"""Named fault hooks for tests: off unless a test (or TSCHED_FAILPOINTS) turns them on.

Names:
- `skip_sync_before_send`: Raft messages leave without the group commit that must precede
  them. Exists so that a test can prove it detects the loss this causes.
- `crash_after_ack`: a follower exits right after it acknowledges (`next_node_idx`,
  success) an index beyond what its log held at start-up, first recording the acked index
  in `record_path` (fsynced) so that a test can compare it with the log after a restart.
- `accept_stale_tokens`: a completion or failure report is proposed with the task's
  current fencing token (as this node's replica knows it) instead of the caller's, so the
  state machine's stale-token check never fires. Exists so that the fault harness can prove
  that it detects a zombie worker's accepted result.
- `crash_after_claim`: the leader exits right after a Claim that took tasks commits, before
  the claim is answered (the answer is lost with the leader). Once per `record_path`: a
  node started with the file already written does not crash, so the next leader answers.
- `diverge_apply`: this node's state machine refuses every completion as `stale_token`
  where its peers accept it (`raft.machine_kit.diverging_kit`): a replica that applies differently. Set it
  on one node only (`node_env` in tests/harness/cluster.py); exists so that a test can
  prove that replicas' digests then differ.
- `count_unsynced_entries`: a leader counts itself toward a majority for every entry in its
  log, synced or not (own_durability.py's invariant OWN_DURABLE_COMMIT broken). Exists so
  that a test can prove it detects a commit the leader's own disk did not hold.
- `stall_log_writer`: the log writer (journal.py, `sync_soon`) waits while the file
  `record_path` + ".stall" exists before each commit it was handed: a slow disk on the
  leader, held as long as a test needs.
- `stall_leader_apply`: while this node leads, its Raft thread applies no committed entry
  while the file `record_path` + ".apply_stall" exists (it still commits, and tells its
  followers, which apply): a leader whose apply lags its commit, as a tick that cuts its
  apply slice leaves it (apply_budget.py), held as long as a test needs.
- `stall_follower_apply`: the same while this node follows: a replica that has not applied
  what its log holds (a membership change, say), held as long as a test needs.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_NAMES = "TSCHED_FAILPOINTS"
ENV_RECORD = "TSCHED_FAILPOINTS_RECORD"
KNOWN = frozenset({"skip_sync_before_send", "crash_after_ack", "accept_stale_tokens",
                   "crash_after_claim", "diverge_apply", "count_unsynced_entries",
                   "stall_log_writer", "stall_leader_apply", "stall_follower_apply"})
CRASH_EXIT_CODE = 75


@dataclass(frozen=True)
class Failpoints:
    names: frozenset[str] = frozenset()
    record_path: Path | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.names) - KNOWN)
        if unknown:
            raise ValueError(f"unknown failpoints {unknown}; known: {sorted(KNOWN)}")

    @classmethod
    def of(cls, *names: str, record_path: Path | None = None) -> "Failpoints":
        return cls(frozenset(names), record_path)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "Failpoints":
        raw = environ.get(ENV_NAMES, "")
        names = frozenset(n.strip() for n in raw.split(",") if n.strip())
        record = environ.get(ENV_RECORD) or None
        return cls(names, Path(record) if record else None)

    def on(self, name: str) -> bool:
        return name in self.names

    def path_of(self, name: str, suffix: str) -> Path | None:
        """The file a holding failpoint (`stall_*`) holds on while it exists: `record_path`
        + `suffix`; None if `name` is off or there is no `record_path`."""
        if name not in self.names or self.record_path is None:
            return None
        return Path(f"{self.record_path}{suffix}")

    def crash(self, record: str) -> None:
        """Record why, durably, and exit at once (no cleanup: this simulates a crash)."""
        if self.record_path is not None:
            fd = os.open(self.record_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, record.encode() + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
        os._exit(CRASH_EXIT_CODE)

    def crash_once(self, record: str) -> None:
        """`crash`, unless a crash was already recorded in `record_path`."""
        if self.record_path is not None and self.record_path.exists() \
                and self.record_path.stat().st_size:
            return
        self.crash(record)


NONE = Failpoints()

