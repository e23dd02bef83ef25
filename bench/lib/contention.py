"""How much of the machine other processes used while a benchmark ran.

The benchmark machine is shared, so each figure is printed with the CPU share that
processes outside this benchmark's own process tree (itself, its nodes, its peers) took
during the measurement. Linux only; elsewhere it reports nothing.
"""
from __future__ import annotations

import os
import time

_TICKS_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_s() -> float | None:
    """Busy CPU seconds of all cores since boot (everything but idle and iowait)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / _TICKS_S


def _proc_stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of it and its reaped children) of one process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    rest = raw.rsplit(")", 1)[1].split()
    return int(rest[1]), sum(int(x) for x in rest[11:15]) / _TICKS_S


def tree_cpu_s() -> float:
    """CPU seconds used so far by this process and all its descendants, live or reaped
    (a reaped child's time, and its own reaped children's, is in the parent's totals)."""
    root = os.getpid()
    stats: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _proc_stat(int(name))
            if st:
                stats[int(name)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo.extend(children.get(pid, ()))
    return total


class Meter:
    """Measures machine CPU use and this benchmark's own share between start() and stop().

    Descendants that exit count once reaped; one whose parent never reaps it (a killed
    node's own children) counts as "others", so the figure is an upper bound."""

    def __init__(self) -> None:
        self.t0 = self.busy0 = self.ours0 = 0.0

    def start(self) -> "Meter":
        self.t0 = time.monotonic()
        self.busy0 = machine_busy_s() or 0.0
        self.ours0 = tree_cpu_s()
        return self

    def stop(self) -> dict[str, float]:
        wall = max(time.monotonic() - self.t0, 1e-9)
        busy = (machine_busy_s() or 0.0) - self.busy0
        ours = tree_cpu_s() - self.ours0
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        return {
            "wall_s": wall,
            "machine_busy_cores": busy / wall,
            "ours_cores": ours / wall,
            "others_cores": max(0.0, busy - ours) / wall,
            "cores": float(cores),
        }


def describe(usage: dict[str, float]) -> str:
    others = usage["others_cores"]
    verdict = "under contention" if others > 0.25 else "quiet machine"
    return (f"{verdict}: other processes used {others:.2f} of {usage['cores']:.0f} cores, "
            f"this benchmark {usage['ours_cores']:.2f} (machine busy "
            f"{usage['machine_busy_cores']:.2f}) over {usage['wall_s']:.1f} s")
