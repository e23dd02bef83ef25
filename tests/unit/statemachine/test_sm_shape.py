"""statemachine/ stays a house a newcomer can walk: short functions (a module is as long as
its one idea needs: there is no line ceiling on modules, tests/unit/test_house.py). Its
types are checked with the other packages', as they are installed (tests/unit/test_lint.py)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SM_DIR = Path(__file__).resolve().parents[3] / "statemachine"
FUNCTION_LINES_MAX = 60


def _modules() -> list[Path]:
    return sorted(SM_DIR.glob("*.py"))


def _long_functions(source: str, limit: int) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                out.append(f"{node.name} (line {node.lineno}): {lines} lines")
    return out


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_functions_are_short(path: Path) -> None:
    assert _long_functions(path.read_text(), FUNCTION_LINES_MAX) == []


def test_checker_counts_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES_MAX))
    assert _long_functions(f"def f():\n{body}\n", FUNCTION_LINES_MAX) == ["f (line 1): 61 lines"]
    assert _long_functions("def g():\n    pass\n", FUNCTION_LINES_MAX) == []
