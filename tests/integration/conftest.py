"""Fixtures for tests on real tsnode processes (see cluster.py for the helper's API)."""
from __future__ import annotations

import pytest

from tests.harness.cluster import running


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 3-node cluster shared by one test module, with an elected leader."""
    yield from running(tmp_path_factory.mktemp("cluster"))


@pytest.fixture
def fresh_cluster(tmp_path):
    """A 3-node cluster of its own, for tests that kill or restart nodes."""
    yield from running(tmp_path)
