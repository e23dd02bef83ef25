"""The suite's scheduling list (tests/conftest.py) names files that exist: a renamed file
would silently fall back to collection order."""
from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FILES_FIRST

ROOT = Path(__file__).resolve().parents[2]


def test_every_file_run_first_exists() -> None:
    missing = [p for p in LONGEST_FILES_FIRST if not (ROOT / p).is_file()]
    assert missing == []
    assert len(set(LONGEST_FILES_FIRST)) == len(LONGEST_FILES_FIRST)
