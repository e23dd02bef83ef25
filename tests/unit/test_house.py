"""The house rules of node/ and client/: small modules, short functions and classes, imports
in one direction, no circles (statemachine/ has its own: test_sm_shape.py, test_purity.py).

A module over MODULE_LINES_MAX, or a function over FUNCTION_LINES_MAX, needs a named
exception below with its reason; an exception's number is its ceiling, which may only come
down: a module that grows past it fails, and one that shrinks under the rule fails too
until its exception is removed."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE_LINES_MAX = 400
FUNCTION_LINES_MAX = 60
CLASS_LINES_MAX = 400
LOOSE_NODE_MODULES_MAX = 14
# path -> (ceiling in lines, why it may be longer than the rule)
MODULE_EXCEPTIONS: dict[str, tuple[int, str]] = {
    "node/api/openapi.py": (700, "the OpenAPI document: one literal per path, read top to bottom"),
    # Temporary, until the 400-line rule is dropped: the compaction figures, a mixin only to
    # keep the module under 400 lines, are back in the Replica they describe.
    "node/raft/replica.py": (440, "the Replica in one piece: its figures are no mixin"),
}
# "path:function" -> (ceiling in lines, why)
FUNCTION_EXCEPTIONS: dict[str, tuple[int, str]] = {}


def _modules(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


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


@pytest.mark.parametrize("path", _modules("node", "client", "statemachine"), ids=_rel)
def test_module_is_short_and_so_are_its_functions_and_classes(path: Path) -> None:
    rel = _rel(path)
    source = path.read_text()
    ceiling = MODULE_EXCEPTIONS.get(rel, (MODULE_LINES_MAX, ""))[0]
    assert len(source.splitlines()) <= ceiling
    assert _long_defs(source, rel) == []


@pytest.mark.parametrize("rel", sorted(MODULE_EXCEPTIONS))
def test_an_exception_is_still_needed(rel: str) -> None:
    """An exception whose module came under the rule is removed, so the list only shrinks."""
    assert len((ROOT / rel).read_text().splitlines()) > MODULE_LINES_MAX, rel


def test_at_most_three_exceptions_and_none_over_700_lines() -> None:
    assert len(MODULE_EXCEPTIONS) <= 3
    assert all(ceiling <= 700 for ceiling, _ in MODULE_EXCEPTIONS.values())


def test_node_is_rooms_with_few_loose_modules() -> None:
    node = ROOT / "node"
    rooms = [d for d in node.iterdir() if (d / "__init__.py").exists()]
    loose = list(node.glob("*.py"))
    assert len(rooms) >= 4, rooms
    assert len(loose) <= LOOSE_NODE_MODULES_MAX, sorted(p.name for p in loose)


def test_checker_counts_long_functions_and_classes() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES_MAX))
    assert _long_defs(f"def f():\n{body}\n", "x.py") == ["def f (line 1): 61 lines"]
    methods = "\n".join(f"    def m{i}(self):\n        pass\n" for i in range(140))
    assert _long_defs(f"class C:\n{methods}", "x.py") == ["class C (line 1): 420 lines"]
    assert _long_defs("def g():\n    pass\n", "x.py") == []


# --- imports ---------------------------------------------------------------------------------

def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return "tsched." + ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def imported(path: Path) -> set[str]:
    """Every module name `path` imports at run time (at any depth; not under TYPE_CHECKING),
    relative imports resolved, and `from a import b` counted as both `a` and `a.b`."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    name = _dotted(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([module] if module else []))
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    paths = {_dotted(p): p for p in _modules("node", "client", "statemachine")}
    return {name: {m for m in imported(p) if m in paths and m != name}
                   for name, p in paths.items()}


def _is_package_of(a: str, b: str) -> bool:
    return b.startswith(a + ".")


def test_no_two_modules_import_each_other() -> None:
    graph = _graph()
    circles = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps
                      if a in graph.get(b, ()) and not _is_package_of(a, b)
                      and not _is_package_of(b, a)})
    assert circles == []


def test_the_node_never_imports_the_client() -> None:
    for path in _modules("node"):
        bad = sorted(m for m in imported(path) if m == "tsched.client" or m.startswith("tsched.client."))
        assert bad == [], _rel(path)


def test_no_module_of_the_project_is_imported_by_string() -> None:
    """`import_module("tsched.node.x")` hides a module from readers and tools, and a rename
    would turn an import error into silently missing behaviour (auth switched off)."""
    for path in _modules("node", "client"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module"):
                arg = ast.unparse(node.args[0]) if node.args else ""
                assert "tsched" not in arg, f"{_rel(path)}: import_module({arg})"


def test_pysyncobj_stays_inside_raft() -> None:
    """pysyncobj's names (private ones above all) are the business of node/raft/ alone."""
    for path in _modules("node", "client"):
        if _rel(path).startswith("node/raft/"):
            continue
        bad = sorted(m for m in imported(path) if m.split(".")[0] == "pysyncobj")
        assert bad == [], _rel(path)
        assert "_SyncObj__" not in path.read_text(), _rel(path)


def test_one_adapter_owns_pysyncobjs_private_names() -> None:
    """pysyncobj's name-mangled internals (`_SyncObj__x`) are read, written, called and
    overridden in node/raft/syncobj_adapter.py alone: a pysyncobj upgrade reads one module."""
    for path in _modules("node", "client"):
        if _rel(path) != "node/raft/syncobj_adapter.py":
            assert "_SyncObj__" not in path.read_text(), _rel(path)
