"""tsched deterministic task state machine (pure: no I/O, clocks or randomness).

The names below are imported on first use (PEP 562), so that `tsched.statemachine.limits`
can be imported alone (by `tsctl`) without loading the machine and msgpack.
"""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "StateMachine": "machine", "Limits": "limits", "Task": "model", "Attempt": "model",
    "Schedule": "model", "FireRecord": "model", "TenantView": "model", "STATES": "model",
    "TERMINAL": "model", "TABLE": "lifecycle", "decide": "lifecycle",
}
_MODULES = ("codec", "commands", "errors")

__all__ = ["StateMachine", "Limits", "codec", "commands", "errors", "Task", "Attempt",
           "Schedule", "FireRecord", "TenantView", "TABLE", "STATES", "TERMINAL", "decide"]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value
