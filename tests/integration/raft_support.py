"""Helpers for the Raft tests (no tests here): a small state machine, in-process replica
trios (ports, options and waits from tests/harness/), a child process.

Run as a module, it is one Replica in its own process (for crash tests):
    python -m tests.integration.raft_support CONFIG_JSON
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import msgpack

from tests.harness.ports import node_addresses
from tests.harness.raft_options import FAST
from tests.harness.waits import wait_until
from tsched.node.failpoints import Failpoints
from tsched.node.raft.machine_kit import MachineKit
from tsched.node.raft.options import RaftOptions
from tsched.node.raft.replica import Replica
from tsched.statemachine import commands, errors


# --- a small state machine with the StateMachine interface (seq, request table, digest) ----

class MiniMachine:
    """Records submitted task ids; answers a repeated request_id from its request table."""

    def __init__(self) -> None:
        self.seq = 0
        self.tasks: dict[str, str] = {}
        self.requests: dict[str, list] = {}
        self.applied_commands = 0          # commands really applied (not answered twice)

    def apply_batch(self, cmds):
        out = []
        for cmd in cmds:
            if cmd.request_id in self.requests:
                code, value = self.requests[cmd.request_id]
                out.append(errors.Result(code, "", value, {}))
                continue
            self.applied_commands += 1
            if isinstance(cmd, commands.SubmitTask):
                self.tasks[cmd.task_id] = cmd.payload_json
                res = errors.ok({"task_id": cmd.task_id, "n": len(self.tasks)})
            else:
                res = errors.ok(None)
            self.requests[cmd.request_id] = [res.code, res.value]
            out.append(res)
        self.seq += 1
        return out

    def snapshot(self) -> bytes:
        return msgpack.packb([self.seq, self.applied_commands, self.tasks, self.requests])

    @classmethod
    def restore(cls, blob: bytes) -> "MiniMachine":
        sm = cls()
        sm.seq, sm.applied_commands, sm.tasks, sm.requests = msgpack.unpackb(blob)
        return sm

    def digest(self) -> str:
        return hashlib.sha256(self.snapshot()).hexdigest()


def mini_kit() -> MachineKit:
    from tsched.statemachine import codec
    return MachineKit(new=MiniMachine, restore=MiniMachine.restore,
                      encode_batch=codec.encode_batch, decode_batch=codec.decode_batch,
                      barrier=lambda rid, now: commands.Barrier(request_id=rid, now_ms=now))


def submit(rid: str, task_id: str | None = None, payload: str = "null") -> commands.SubmitTask:
    return commands.SubmitTask(request_id=rid, now_ms=1_000, task_id=task_id or rid,
                               tenant="t", task_type="x", payload_json=payload)


# --- clusters ------------------------------------------------------------------------------

def cluster_spec(root: Path, n: int = 3) -> list[dict]:
    ids = [f"n{i + 1}" for i in range(n)]
    addrs, _ = node_addresses(ids, 1)
    return [{"id": nid, "raft": addrs[nid], "data_dir": str(root / nid),
             "peers": {p: a for p, a in addrs.items() if p != nid}} for nid in ids]


def real_replica(spec: dict, options: RaftOptions = FAST) -> Replica:
    """A replica with the real state machine (make_replica's default is a small test one)."""
    return Replica(self_id=spec["id"], self_raft=spec["raft"], peers=spec["peers"],
                   data_dir=spec["data_dir"], options=options)


def running_trio(tmp_path: Path, options: RaftOptions = FAST):
    """Generator for a fixture: three started real replicas, stopped afterwards
    ({"specs", "replicas"}; a test may replace a replica, or set it to None once stopped)."""
    specs = cluster_spec(tmp_path)
    box = {"specs": specs, "replicas": [real_replica(s, options) for s in specs]}
    for r in box["replicas"]:
        r.start()
    yield box
    for r in box["replicas"]:
        if r is not None:
            r.stop()


def make_replica(spec: dict, options: RaftOptions = FAST, failpoints: Failpoints | None = None,
                 kit: MachineKit | None = None) -> Replica:
    return Replica(self_id=spec["id"], self_raft=spec["raft"], peers=spec["peers"],
                   data_dir=Path(spec["data_dir"]), options=options, failpoints=failpoints,
                   machine=kit or mini_kit())


def leader_of(replicas) -> Replica | None:
    ready = [r for r in replicas if r is not None and r.is_ready_leader()]
    return ready[0] if len(ready) == 1 else None


def propose_sync(replica: Replica, cmds, timeout_s: float = 10.0) -> None:
    """Hand a batch to Raft and wait until it is applied locally (plain threads, no loop)."""
    rids = {c.request_id for c in cmds}
    seen: set[str] = set()
    replica.add_apply_listener(lambda seq, cs, rs: seen.update(c.request_id for c in cs))
    replica.propose_blob(replica.encode_batch(cmds))
    wait_until(lambda: rids <= seen, timeout_s, f"{sorted(rids)[:3]} applied")


# --- a replica in its own process -------------------------------------------------------------

def child_main(config_path: str) -> None:
    import logging
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    cfg = json.loads(Path(config_path).read_text())
    fp = Failpoints.from_env(os.environ)
    spec, options = cfg["spec"], RaftOptions(**cfg.get("options", {}))
    if cfg.get("kit") == "real":
        replica = Replica(self_id=spec["id"], self_raft=spec["raft"], peers=spec["peers"],
                          data_dir=Path(spec["data_dir"]), options=options, failpoints=fp)
    else:
        replica = make_replica(spec, options=options, failpoints=fp)
    replica.start()
    status_path = Path(cfg["status_path"])
    while True:  # publish status for the parent until killed
        tmp = status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"leader": replica.leader_id(), "seq": replica.applied_seq}))
        os.replace(tmp, status_path)
        time.sleep(0.2)


if __name__ == "__main__":
    child_main(sys.argv[1])
