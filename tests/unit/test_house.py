"""The house rules of node/, client/ and statemachine/: rooms in one order, imports that go
down that order only, no circle of any length, short functions (statemachine/ has its own
purity rules too: test_sm_shape.py, test_purity.py).

node/'s rooms, bottom to top (docs/internals.md walks them in this order):

    base        errors, clock, ids, failpoints, config, tls, topology, gcpolicy, present,
                forwarding: what every room needs (the error type, time, ids, the config
                and the shard arithmetic over it, the GC policy, records as JSON, the
                HTTP link to the leader)
    raft        replication: the replica, its log, membership, proposing and committing
    scheduling  when tasks run: claims, the leader's timer, cron
    ops         operations: metrics, the archive, logs, systemd notifications
    services    the Node: the services a handler uses
    api         the HTTP API, by resource
    shards      a sharded node's router and supervisor, built on the api
    top         restore, assembly (the composition root), main (the command line)

A module imports only from its own room or a lower one, counting imports under
TYPE_CHECKING and inside functions: a type-only arrow up is still a room leaning on the one
above it. A module in no room fails, so a new loose module is placed on purpose.

Size follows the seam: there is no per-module line ceiling (a module is as long as its one
idea needs); a function over FUNCTION_LINES_MAX lines, or a class over CLASS_LINES_MAX,
needs a named exception below with its reason, and an exception's number only comes down.
"""
from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FUNCTION_LINES_MAX = 60
CLASS_LINES_MAX = 400

# node/'s rooms, bottom to top: (room, the modules or packages in it, relative to node/).
ROOMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("errors", "clock", "ids", "failpoints", "forkserver", "config", "tls", "topology",
              "gcpolicy", "present", "forwarding")),
    ("raft", ("raft",)),
    ("scheduling", ("scheduling",)),
    ("ops", ("ops",)),
    ("services", ("services",)),
    ("api", ("api",)),
    ("shards", ("shards",)),
    ("top", ("restore", "assembly", "main", "zygote")),
)
# Imports inside a function in node/ are allowed only here: "module -> imported" -> why.
FUNCTION_IMPORTS: dict[str, str] = {
    "tsched.node.assembly -> tsched.node.shards.supervisor":
        "only a sharded node's supervisor process runs it; its router app costs every other "
        "node process ~23 ms at start",
}
# "path:function" -> (ceiling in lines, why)
FUNCTION_EXCEPTIONS: dict[str, tuple[int, str]] = {}


def _modules(root: Path, *tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (root / top).rglob("*.py"))


def _rel(path: Path, root: Path = ROOT) -> str:
    return path.relative_to(root).as_posix()


def _long_defs(source: str, path: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            ceiling = FUNCTION_EXCEPTIONS.get(f"{path}:{node.name}", (FUNCTION_LINES_MAX, ""))[0]
            if lines > ceiling:
                out.append(f"def {node.name} (line {node.lineno}): {lines} lines")
        elif isinstance(node, ast.ClassDef):
            lines = node.end_lineno - node.lineno + 1
            if lines > CLASS_LINES_MAX:
                out.append(f"class {node.name} (line {node.lineno}): {lines} lines")
    return out


@pytest.mark.parametrize("path", _modules(ROOT, "node", "client", "statemachine"), ids=_rel)
def test_functions_and_classes_are_short(path: Path) -> None:
    assert _long_defs(path.read_text(), _rel(path)) == []


@pytest.mark.parametrize("key", sorted(FUNCTION_EXCEPTIONS))
def test_a_function_exception_is_still_needed(key: str) -> None:
    path, name = key.split(":")
    source = (ROOT / path).read_text()
    lengths = [n.end_lineno - n.lineno + 1 for n in ast.walk(ast.parse(source))
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    assert lengths and max(lengths) > FUNCTION_LINES_MAX, key


def test_checker_counts_long_functions_and_classes() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES_MAX))
    assert _long_defs(f"def f():\n{body}\n", "x.py") == ["def f (line 1): 61 lines"]
    methods = "\n".join(f"    def m{i}(self):\n        pass\n" for i in range(140))
    assert _long_defs(f"class C:\n{methods}", "x.py") == ["class C (line 1): 420 lines"]
    assert _long_defs("def g():\n    pass\n", "x.py") == []


# --- imports ---------------------------------------------------------------------------------

def _dotted(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return "tsched." + ".".join(parts)


def _inside(tree: ast.AST, kinds: tuple[type, ...], test: str = "") -> set[int]:
    """ids of the nodes below a node of `kinds` (an `if` whose test mentions `test`)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, kinds) and (not test or test in ast.unparse(node.test)):
            out.update(id(n) for n in ast.walk(node) if n is not node)
    return out


def imports(path: Path, root: Path = ROOT) -> Iterator[tuple[str, str]]:
    """(module name, kind) for every import in `path` at any depth: kind is "run",
    "type" (under TYPE_CHECKING) or "function" (inside a function). Relative imports are
    resolved, and `from a import b` counts as both `a` and `a.b` (the latter's kind marked
    with a `+`: `b` may be a module or a name in `a`)."""
    tree = ast.parse(path.read_text())
    typing_only = _inside(tree, (ast.If,), "TYPE_CHECKING")
    in_function = _inside(tree, (ast.FunctionDef, ast.AsyncFunctionDef))
    name = _dotted(path, root)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([module] if module else []))
            names = [module] + [f"{module}.{a.name}" for a in node.names]
        else:
            continue
        kind = ("type" if id(node) in typing_only else
                "function" if id(node) in in_function else "run")
        for i, imported_name in enumerate(names):
            # `from a import b`: `a` is the module named; `a.b` may be a module or a name
            yield imported_name, kind if i == 0 or isinstance(node, ast.Import) else kind + "+"


def imported(path: Path, root: Path = ROOT) -> set[str]:
    """Every module name `path` imports at run time (not under TYPE_CHECKING)."""
    return {m for m, kind in imports(path, root) if kind.rstrip("+") != "type"}


def graph(root: Path, tops: Iterable[str], kinds: set[str]) -> dict[str, set[str]]:
    """The project's modules under `tops` and which of them each imports (by `kinds`)."""
    paths = {_dotted(p, root): p for p in _modules(root, *tops)}
    return {name: {m for m, kind in imports(p, root) if kind.rstrip("+") in kinds and m in paths
                   and m != name and not name.startswith(m + ".")}
            for name, p in paths.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): every import
    circle, whatever its length."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def room_of(module: str) -> int | None:
    """The position of a node/ module's room in ROOMS, None for a module in no room."""
    parts = module.split(".")
    if parts[:2] != ["tsched", "node"] or len(parts) < 3:
        return 0 if parts == ["tsched", "node"] else None
    for i, (_, members) in enumerate(ROOMS):
        if parts[2] in members:
            return i
    return None


def against_the_order(root: Path) -> list[str]:
    """Every import in node/ that goes up the room order, and every module in no room."""
    bad = []
    for name, deps in graph(root, ["node"], {"run", "type", "function"}).items():
        mine = room_of(name)
        if mine is None:
            bad.append(f"{name}: in no room (tests/unit/test_house.py ROOMS)")
            continue
        for dep in sorted(deps):
            theirs = room_of(dep)
            if theirs is not None and theirs > mine:
                bad.append(f"{name} ({ROOMS[mine][0]}) -> {dep} ({ROOMS[theirs][0]})")
    return bad


def test_node_imports_follow_the_room_order() -> None:
    assert against_the_order(ROOT) == []


def test_node_has_no_import_circle_even_for_types() -> None:
    assert cycles(graph(ROOT, ["node"], {"run", "type", "function"})) == []


def test_client_and_statemachine_have_no_import_circle_at_run_time() -> None:
    for top in ("client", "statemachine"):
        assert cycles(graph(ROOT, [top], {"run", "function"})) == [], top


def test_node_imports_inside_functions_only_where_named() -> None:
    found = set()
    for path in _modules(ROOT, "node"):
        name = _dotted(path, ROOT)
        found.update(f"{name} -> {m}" for m, kind in imports(path) if kind == "function"
                     and m.startswith("tsched."))
    assert sorted(found - set(FUNCTION_IMPORTS)) == []
    assert sorted(set(FUNCTION_IMPORTS) - found) == [], "an allowance no longer needed"


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_the_checker_fails_an_import_against_the_order(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "node/__init__.py": "",
        "node/raft/__init__.py": "",
        "node/raft/replica.py": "def f():\n    from tsched.node.api import app\n",
        "node/api/__init__.py": "",
        "node/api/app.py": "from tsched.node.raft import replica\n",
        "node/scheduling/__init__.py": "",
        "node/scheduling/timer.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                     "    from tsched.node.services import Node\n"),
        "node/services.py": "",
        "node/stray.py": "",
    })
    assert against_the_order(root) == [
        "tsched.node.raft.replica (raft) -> tsched.node.api (api)",
        "tsched.node.raft.replica (raft) -> tsched.node.api.app (api)",
        "tsched.node.scheduling.timer (scheduling) -> tsched.node.services (services)",
        "tsched.node.stray: in no room (tests/unit/test_house.py ROOMS)",
    ]


def test_the_checker_fails_a_circle_of_three(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "node/__init__.py": "",
        "node/ops/__init__.py": "",
        "node/ops/a.py": "from tsched.node.ops import b\n",
        "node/ops/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from tsched.node.ops.c import C\n",
        "node/ops/c.py": "def f():\n    from tsched.node.ops import a\n",
        "node/ops/d.py": "from tsched.node.ops import a\n",
    })
    edges = graph(root, ["node"], {"run", "type", "function"})
    assert cycles(edges) == [["tsched.node.ops.a", "tsched.node.ops.b", "tsched.node.ops.c"]]
    assert cycles(graph(root, ["node"], {"run"})) == []


def test_the_node_never_imports_the_client() -> None:
    for path in _modules(ROOT, "node"):
        bad = sorted(m for m, _ in imports(path)
                     if m == "tsched.client" or m.startswith("tsched.client."))
        assert bad == [], _rel(path)


def test_no_module_of_the_project_is_imported_by_string() -> None:
    """`import_module("tsched.node.x")` hides a module from readers and tools, and a rename
    would turn an import error into silently missing behaviour (auth switched off)."""
    for path in _modules(ROOT, "node", "client"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module"):
                arg = ast.unparse(node.args[0]) if node.args else ""
                assert "tsched" not in arg, f"{_rel(path)}: import_module({arg})"


def test_pysyncobj_stays_inside_raft() -> None:
    """pysyncobj's names are the business of node/raft/ alone."""
    for path in _modules(ROOT, "node", "client"):
        if not _rel(path).startswith("node/raft/"):
            bad = sorted(m for m in imported(path) if m.split(".")[0] == "pysyncobj")
            assert bad == [], _rel(path)


def test_one_adapter_owns_pysyncobjs_private_names() -> None:
    """pysyncobj's name-mangled internals (`_SyncObj__x`) are read, written, called and
    overridden in node/raft/syncobj_adapter.py alone: a pysyncobj upgrade reads one module."""
    for path in _modules(ROOT, "node", "client"):
        if _rel(path) != "node/raft/syncobj_adapter.py":
            assert "_SyncObj__" not in path.read_text(), _rel(path)


def test_no_two_node_modules_share_a_file_name() -> None:
    names: dict[str, list[str]] = {}
    for path in _modules(ROOT, "node"):
        if path.name != "__init__.py":
            names.setdefault(path.name, []).append(_rel(path))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}


def test_docs_internals_names_every_module_of_the_node_and_the_state_machine() -> None:
    """A newcomer finds any module in docs/internals.md (it walks the rooms in order)."""
    text = (ROOT / "docs" / "internals.md").read_text()
    unnamed = [_rel(p) for package in ("node", "statemachine") for p in _modules(ROOT, package)
               if p.name != "__init__.py" and f"`{p.name}`" not in text
               and f"{p.parent.name}/{p.name}`" not in text]
    assert unnamed == []
