"""The autoscaling signals (DESIGN 14.4), computed at scrape time: how many tasks a claim
could take now (`tsched_ready_tasks{task_type}`, every replica, from the replicated state)
and how many worker slots are busy and idle (`tsched_worker_slots{state, task_type}`, the
leader only, from the reports its claims and heartbeats carried:
scheduling/worker_slots.py). Both keep at most TASK_TYPE_LABELS_MAX task types (the ones
with the most tasks, resp. slots; ties by name), the others summed as OTHER_LABEL."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from tsched.node.ops.counters import OTHER_LABEL, TASK_TYPE_LABELS_MAX

V = TypeVar("V")


def bounded_labels(values: dict[str, V], rank: Callable[[V], float],
                   fold: Callable[[Iterable[V]], V], limit: int) -> list[tuple[str, V]]:
    """(label, value) for the `limit` labels ranking highest (ties by name), then the
    others folded into one (OTHER_LABEL, value), so a family has at most limit + 1 series."""
    ranked = sorted(values.items(), key=lambda kv: (-rank(kv[1]), kv[0]))
    kept, rest = ranked[:limit], ranked[limit:]
    out = sorted(kept)
    if rest:
        out.append((OTHER_LABEL, fold(v for _, v in rest)))
    return out


def capacity_families(ready: dict[str, int],
                      slots: dict[str, tuple[int, int]] | None) -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "tsched_ready_tasks", f"Pending tasks a claim could take now, by task type: due "
        f"(not future-dated) and not held by a keyed limit (the {TASK_TYPE_LABELS_MAX} "
        f"types with the most; the others summed as task_type=\"{OTHER_LABEL}\")",
        labels=["task_type"])
    for task_type, n in bounded_labels(ready, float, sum, TASK_TYPE_LABELS_MAX):
        family.add_metric([task_type], n)
    yield family
    if slots is None:   # not the leader: it alone hears the workers
        return
    family = GaugeMetricFamily(
        "tsched_worker_slots", f"Worker slots (handler threads or async slots) by state and "
        f"task type, as the workers' claims and heartbeats reported them to the leader in "
        f"the last minute; a worker's idle slots count under every type it serves (the "
        f"{TASK_TYPE_LABELS_MAX} types with the most slots; the others as "
        f"task_type=\"{OTHER_LABEL}\")", labels=["state", "task_type"])
    for task_type, (busy, idle) in bounded_labels(slots, sum, _pair_sum,
                                                   TASK_TYPE_LABELS_MAX):
        family.add_metric(["busy", task_type], busy)
        family.add_metric(["idle", task_type], idle)
    yield family


def _pair_sum(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    busy = idle = 0
    for b, i in pairs:
        busy, idle = busy + b, idle + i
    return busy, idle
