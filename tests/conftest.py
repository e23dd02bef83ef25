"""Fixtures shared by the whole suite.

- `replica`: a real single-node Raft cluster in this process (the harness's FAST options:
  short election timeouts, no fsync), one per test module: every write goes through Raft,
  the LMDB log and the state machine;
- `api`: the node's real aiohttp app on that replica, through aiohttp's test client
  (`tests.api_support.Api`);
- `tt`: a task type of one test only (modules share one replica).

Real multi-node clusters of `tsnode` processes: tests/harness/cluster.py (`Cluster`)
and the `cluster` / `fresh_cluster` fixtures of tests/integration/conftest.py.
"""
from __future__ import annotations

import compileall
import os
import sys
import uuid
from pathlib import Path

import pytest

from tests.api_support import Api
from tests.harness import cluster as harness_cluster
from tests.harness.ports import free_port
from tests.harness.raft_options import FAST
from tests.harness.waits import wait_until
from tsched.client.forked import Zygotes
from tsched.node.services import Node
from tsched.node.assembly import node_app
from tsched.node.clock import Clock
from tsched.node.config import ClusterConfig, NodeConfig
from tsched.node.raft.replica import Replica


# The files that take longest (`pytest -n 4 --durations=0`, summed per file, 2026-12-06:
# 15-270 s each on 2 cores), run first. Under `--dist loadfile` each file goes whole to one
# process in collection order (`--no-loadscope-reorder`, pyproject.toml), so one of them collected last
# would run alone at the end of the run (the fault-harness run did, for its last minute).
# Only the order changes: every test runs.
LONGEST_FILES_FIRST = (
    "tests/integration/test_compiled_build.py",
    "tests/integration/test_shards_cluster.py",
    "tests/jepsen_like/test_short_run.py",
    "tests/integration/test_fuzz_api.py",
    "tests/integration/test_membership_shards.py",
    "tests/integration/test_readme_cluster.py",
    "tests/integration/test_membership_cluster.py",
    "tests/integration/test_worker_cluster.py",
    "tests/integration/test_schedules_cluster.py",
    "tests/integration/test_backup_restore.py",
    "tests/unit/client/test_app_types.py",
    "tests/integration/test_tsworker_cluster.py",
    "tests/integration/test_cli_dev.py",
    "tests/integration/test_handoff.py",
    "tests/integration/test_node_faults.py",
    "tests/integration/test_storage_faults.py",
)

# Files that compute and never wait (no cluster, no timer, no network), run last. Most of
# the others wait on clusters for much of their time: run while the cluster tests keep
# both cores busy, their waits cost no wall time; run last, as collection order had them,
# they left a core idle for much of the run's last minute. These keep both cores busy to
# the end. The longest go first among them.
COMPUTING_FILES_LAST = (
    "tests/property/test_sm_model.py",
    "tests/property/test_sm_keyed_limits_model.py",
    "tests/unit/node/scheduling/test_cron_property.py",
    "tests/unit/test_house.py",
    "tests/unit/test_lint.py",
    "tests/property/",
    "tests/unit/statemachine/",
)

ROOT = Path(__file__).resolve().parents[1]
# The project's packages, installed editable: their modules are imported from here.
PACKAGES = ("statemachine", "node", "client")


def pytest_configure(config) -> None:
    """Bytecode is cached for this run, whatever PYTHONDONTWRITEBYTECODE says (container
    images often set it):
    - the project's modules are compiled once, before any node starts. The suite starts
      some 240 `tsnode` processes, and each would otherwise compile every module of the node
      from source again, about a quarter of its start-up CPU;
    - the suite's own processes (xdist's workers, the nodes) inherit the setting, so
      pytest keeps the test modules it rewrites for its assertion messages: without it each
      of the three workers rewrote all ~500 of them, and collection took 27 s instead of
      15 s of a run on 2 cores;
    - with xdist, the test modules are rewritten once, here, not by every worker
      (`rewrite_test_modules_once`).
    The caches live in `__pycache__` folders, which git ignores."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if sys.dont_write_bytecode:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        sys.dont_write_bytecode = False
        for package in PACKAGES:
            compileall.compile_dir(ROOT / package, quiet=1)
    if config.getoption("numprocesses", None) and config.getoption("assertmode") == "rewrite":
        rewrite_test_modules_once(config)


def rewrite_test_modules_once(config) -> None:
    """pytest rewrites each test module's asserts (for its failure messages) and caches the
    result beside it. In a fresh clone nothing is cached, and each of xdist's four workers
    rewrote all ~200 test modules at once: collection took 17.0 s and 31.7 CPU-s of a
    2-core machine, against 13.3 s and 20.8 CPU-s rewritten once. The controller, which
    collects nothing, rewrites them before the workers start, into pytest's own
    hash-checked cache files, which the workers read as any later run would; one forked
    process per core shares the work (about 6 s of one core in a fresh clone, with the
    others idle). These are pytest's internals: should they move, the run only starts as
    it did before, and a module a process failed to rewrite is rewritten by its worker."""
    try:
        from _pytest.assertion import rewrite
        state = config.stash[rewrite.assertstate_key]
    except (ImportError, AttributeError, KeyError):
        return
    patterns = config.getini("python_files")
    paths = [path for path in sorted((ROOT / "tests").rglob("*.py"))
             if path.name == "conftest.py" or any(path.match(p) for p in patterns)]
    shares = max(1, min(os.cpu_count() or 1, 4))
    children = []
    for share in range(1, shares):
        pid = os.fork()
        if pid == 0:
            try:
                rewrite_modules(rewrite, state, config, paths[share::shares])
            finally:
                os._exit(0)
        children.append(pid)
    rewrite_modules(rewrite, state, config, paths[0::shares])
    for pid in children:
        os.waitpid(pid, 0)


def rewrite_modules(rewrite, state, config, paths: list[Path]) -> None:
    for path in paths:
        try:
            cache_dir = rewrite.get_cache_dir(path)
            pyc = cache_dir / (path.name[:-3] + rewrite.PYC_TAIL)
            if (rewrite._read_pyc(path, pyc, state.trace) is None
                    and rewrite.try_makedirs(cache_dir)):
                source_hash, code = rewrite._rewrite_test(path, config)
                rewrite._write_pyc(state, code, source_hash, pyc)
        except (TypeError, AttributeError):
            return      # the internals moved: the workers rewrite, as they did before
        except (OSError, SyntaxError):
            continue    # the worker that imports it reports it, as it did before


def pytest_collection_modifyitems(config, items) -> None:
    """The longest files first, the files that only compute last, and between them the
    cluster files and the in-process unit files interleaved (each spread evenly over the
    middle of the run), so that files that wait overlap files that compute. Each file's
    tests stay together and in their order (a stable sort by file), so module-scoped
    clusters are still shared."""
    order = run_order(list(dict.fromkeys(item.nodeid.split("::")[0] for item in items)))
    items.sort(key=lambda item: order[item.nodeid.split("::")[0]])


def run_order(files: list[str]) -> dict[str, tuple[int, float]]:
    """Each file's place: (0, its rank) for the longest, (2, its prefix's rank) for those
    that only compute, (1, its share of the way through its kind) for the middle, where
    the cluster files and the unit files are each spread over [0, 1) in collection order."""
    order: dict[str, tuple[int, float]] = {}
    middle: dict[bool, list[str]] = {False: [], True: []}     # is a unit file: its kind
    for path in files:
        last = next((i for i, p in enumerate(COMPUTING_FILES_LAST) if path.startswith(p)),
                    None)
        if path in LONGEST_FILES_FIRST:
            order[path] = (0, LONGEST_FILES_FIRST.index(path))
        elif last is not None:
            order[path] = (2, last)
        else:
            middle[path.startswith("tests/unit/")].append(path)
    for kind in middle.values():
        order.update((path, (1, i / len(kind))) for i, path in enumerate(kind))
    return order


@pytest.fixture(scope="session", autouse=True)
def node_zygotes():
    """Every `Cluster` of this test process forks its nodes from zygotes, one per node id
    with a hash seed of its own (tsched.client.forked): the suite starts some 400 nodes,
    and each would otherwise spend about half a CPU-second importing the node."""
    zygotes = Zygotes()
    harness_cluster.ZYGOTES = zygotes
    yield zygotes
    harness_cluster.ZYGOTES = None
    zygotes.close()


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    data = tmp_path_factory.mktemp("replica")
    raft = f"127.0.0.1:{free_port()}"
    r = Replica(self_id="n1", self_raft=raft, peers={}, data_dir=data, options=FAST)
    r.start()
    wait_until(r.is_ready_leader, 10, "the single node to become a ready leader")
    yield r
    r.stop()


@pytest.fixture
async def api(replica, aiohttp_client):
    me = NodeConfig(id="n1", raft=replica.self_raft, http="127.0.0.1:1", data_dir="/nonexistent")
    node = Node(node_id="n1", config=ClusterConfig(name="t", nodes=(me,)), replica=replica,
                clock=Clock())
    client = await aiohttp_client(node_app(node))
    yield Api(client, node)


@pytest.fixture
def tt() -> str:
    """A task type of this test only: the module shares one replica."""
    return "t-" + uuid.uuid4().hex[:8]
