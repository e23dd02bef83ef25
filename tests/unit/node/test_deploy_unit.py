"""deploy/systemd/tsnode@.service: systemd accepts it (`systemd-analyze verify`, no warning),
and it says what the node needs: a non-root user, readiness, restarts on failure but not
on storage or configuration errors, and a stop timeout longer than the node's own stop."""
from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tsched.node.assembly import SHUTDOWN_S, STOP_STACKS_AFTER_S
from tsched.node.raft.handoff import HANDOFF_S
from tsched.node.raft.storage_faults import STORAGE_CORRUPT_EXIT_CODE, STORAGE_ERROR_EXIT_CODE

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "deploy" / "systemd" / "tsnode@.service"
INSTALLED_TSNODE = "/opt/tsched/bin/tsnode"


def _service() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str   # systemd keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser["Service"]


def test_systemd_verifies_the_unit_without_a_warning(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    tsnode = Path(sys.executable).parent / "tsnode"
    assert tsnode.exists(), "the project is installed in this environment (pip install -e .)"
    # The unit names the install path of docs/operations.md; verify checks that the command
    # exists, so it is pointed at this environment's tsnode.
    (tmp_path / "tsnode@.service").write_text(
        UNIT.read_text().replace(INSTALLED_TSNODE, str(tsnode)))
    out = subprocess.run([analyze, "verify", str(tmp_path / "tsnode@n1.service")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout + out.stderr == ""


def test_the_unit_runs_tsnode_as_its_instance_with_readiness() -> None:
    service = _service()
    assert service["ExecStart"] == f"{INSTALLED_TSNODE} --config /etc/tsched/cluster.toml --id %i"
    assert service["Type"] == "notify"
    assert service["User"] not in ("", "root")
    assert service["Restart"] == "on-failure"


def test_errors_a_restart_cannot_mend_are_not_restarted() -> None:
    codes = {int(c) for c in _service()["RestartPreventExitStatus"].split()}
    assert {2, STORAGE_ERROR_EXIT_CODE, STORAGE_CORRUPT_EXIT_CODE} <= codes


def test_the_stop_timeout_outlasts_the_nodes_own_stop() -> None:
    """systemd kills what is left after TimeoutStopSec: a node must have had its handoff,
    its in-flight requests and its stack dump of a hung stop first."""
    timeout_s = float(_service()["TimeoutStopSec"])
    assert timeout_s > HANDOFF_S + SHUTDOWN_S
    assert timeout_s > STOP_STACKS_AFTER_S
