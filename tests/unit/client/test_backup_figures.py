"""`tsctl backup`'s message and `tsnode --restore`'s log give the same figures: the file's
size is the size of the file written, and the log index a shard's section names is the one
the restored node's snapshot log line names. `tsctl backup` against the in-process API (a
single replica), then a restore of its file into a fresh data dir, loaded as a node would."""
from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path

from click.testing import CliRunner

from tsched.client.cli import cli
from tsched.node.config import ClusterConfig, NodeConfig
from tsched.node.raft import snapshot_loader
from tsched.node.raft.watchdog import Watchdog
from tsched.node.restore import restore
from tsched.statemachine import StateMachine

from tests.api_support import Api


def _tsctl(url: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--url", url, *args])
    assert result.exit_code == 0, result.output
    return result.output


async def test_the_backup_message_and_the_restored_log_give_the_same_figures(
        api: Api, tt, tmp_path, caplog):
    for _ in range(3):
        await api.submit(task_type=tt, payload={"pad": "x" * 500})
    url = str(api.client.make_url("")).rstrip("/")
    path = tmp_path / "cluster.tsbak"
    # tsctl is synchronous: off the loop that serves the API
    out = await asyncio.to_thread(_tsctl, url, "backup", str(path))
    said = re.search(r"written to \S+ \((\d+) bytes\): shard 0 at log index (\d+) "
                     r"\(a snapshot of (\d+) bytes\)", out)
    assert said, out
    file_bytes, index, section_bytes = (int(g) for g in said.groups())
    assert file_bytes == path.stat().st_size
    assert 0 < section_bytes < file_bytes           # the file adds its head and checksum
    shown = json.loads(await asyncio.to_thread(_tsctl, url, "backup", str(path), "--json"))
    assert shown["file_bytes"] == path.stat().st_size
    assert shown["sections"][0]["raft_index"] >= index   # a later backup, no earlier

    me = NodeConfig(id="n1", raft="127.0.0.1:1", http="127.0.0.1:2",
                    data_dir=str(tmp_path / "fresh"))
    restore(ClusterConfig(name="t", nodes=(me,)), me, str(path))
    caplog.set_level(logging.INFO, logger="tsched")
    watchdog = Watchdog(stall_ready_s=60, stall_exit_s=600, tick_failures_max=3)
    (last, _, _), sm = snapshot_loader.load(Path(me.data_dir) / "snapshot.bin", watchdog,
                                            StateMachine.restore)
    logged = [r.getMessage() for r in caplog.records if "restored in" in r.getMessage()]
    assert logged and logged[-1].startswith(
        f"raft: snapshot at index {shown['sections'][0]['raft_index']} restored"), logged
    assert last[1] == shown["sections"][0]["raft_index"]
    assert len(sm.list_tasks(task_type=tt)[0]) == 3
