"""A description of the machine a figure was measured on (printed with every figure)."""
from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_mib() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def _filesystem(path: str) -> str:
    """The file system type holding `path`: fsync costs differ wildly (tmpfs is free)."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mount, fstype = parts[1], parts[2]
                if os.path.realpath(path).startswith(mount) and len(mount) > len(best):
                    best, kind = mount, fstype
    except OSError:
        pass
    return kind


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def code_version() -> str:
    """The commit the benchmark (and, installed editable, the node) runs; `+dirty` when the
    working tree differs from it: figures belong to a version of the code."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha + ("+dirty" if dirty else "")) if sha else "unknown"


def tsched_build() -> str:
    """`compiled` where the `tsched` this process imports (and the nodes it starts, which
    inherit its environment) is the mypyc build (setup.py), else `python`."""
    try:
        from tsched.statemachine import StateMachine
    except ImportError:
        return "unknown"
    return "compiled" if hasattr(StateMachine, "__mypyc_attrs__") else "python"


def describe(data_dir: str | None = None) -> dict[str, str]:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info = {
        "cores": str(cores),
        "cpu": _cpu_model(),
        "memory": f"{_mem_total_mib()} MiB",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": platform.platform(),
        "loadavg_at_start": _loadavg(),
    }
    if data_dir:
        info["data_fs"] = _filesystem(data_dir)
    info["uvloop"] = "available" if importlib.util.find_spec("uvloop") else "absent"
    info["executable"] = sys.executable
    info["code"] = code_version()
    info["tsched_build"] = tsched_build()
    return info
