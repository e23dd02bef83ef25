"""Fixtures for tests on real tsnode processes (see cluster.py for the helper's API)."""
from __future__ import annotations

import pytest

from .cluster import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 3-node cluster shared by one test module, with an elected leader."""
    with Cluster(tmp_path_factory.mktemp("cluster")) as c:
        c.start()
        c.wait_leader()
        yield c


@pytest.fixture
def fresh_cluster(tmp_path):
    """A 3-node cluster of its own, for tests that kill or restart nodes."""
    with Cluster(tmp_path) as c:
        c.start()
        c.wait_leader()
        yield c
