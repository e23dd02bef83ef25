"""The suite's scheduling list (tests/conftest.py) names files that exist: a renamed file
would silently fall back to collection order."""
from __future__ import annotations

from pathlib import Path

from tests.conftest import COMPUTING_FILES_LAST, LONGEST_FILES_FIRST, run_order

ROOT = Path(__file__).resolve().parents[2]


def test_every_file_run_first_exists() -> None:
    missing = [p for p in LONGEST_FILES_FIRST if not (ROOT / p).is_file()]
    assert missing == []
    assert len(set(LONGEST_FILES_FIRST)) == len(LONGEST_FILES_FIRST)
    missing = [p for p in COMPUTING_FILES_LAST if not (ROOT / p).exists()]
    assert missing == []


def test_the_longest_go_first_the_computing_last_and_the_rest_interleave() -> None:
    files = ["tests/integration/test_a.py", "tests/integration/test_b.py",
             "tests/unit/client/test_c.py", "tests/unit/client/test_d.py",
             "tests/unit/statemachine/test_e.py", LONGEST_FILES_FIRST[1], LONGEST_FILES_FIRST[0]]
    got = sorted(files, key=run_order(files).__getitem__)
    assert got == [LONGEST_FILES_FIRST[0], LONGEST_FILES_FIRST[1],
                   "tests/integration/test_a.py", "tests/unit/client/test_c.py",
                   "tests/integration/test_b.py", "tests/unit/client/test_d.py",
                   "tests/unit/statemachine/test_e.py"]


def test_each_worker_gives_its_clusters_ports_of_its_own(monkeypatch):
    """Blocks of different pytest-xdist workers never overlap (tests/harness/ports.py)."""
    from tests.harness.ports import _worker_range
    span, used = 303, []
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    for w in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{w}")
        low, high = _worker_range(10_000, 32_767, span)
        used.append((low, high + span - 1))      # the lowest and highest port of a block
    assert all(a[1] < b[0] for a, b in zip(used, used[1:])), used
    assert used[0][0] == 10_000 and used[-1][1] <= 32_767


def test_files_go_out_in_collection_order():
    """xdist reorders files by their number of tests unless told not to: the list above
    would then order nothing."""
    import tomllib
    opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--no-loadscope-reorder" in opts["addopts"].split()
    assert "--dist loadfile" in opts["addopts"]
