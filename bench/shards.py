"""Shards (DESIGN.md section 13): lifecycles/s, submit latency and each shard leader's CPU
per 1,000 lifecycles at several shard counts on one machine, and a projection for a bigger
one from the measured per-process CPU.

For each shard count S (3 nodes, R = 3), a cluster is started and the lifecycle workload of
`bench.lifecycle` runs with its tasks spread evenly over 2 tenants per shard (the same
tenants' names at every S would land unevenly; these are picked to hash evenly). Around
each run every node process's CPU is read from /proc (utime + stime), per process: the
routers (supervisors), and each shard replica, with the shard's leader named from
`/v1/cluster` after the run. With S = 1 the node is the single-group process (no router).

    python -m bench.shards                              # S = 1, 2, 4; 3 runs x 20,000 tasks
    python -m bench.shards --shards 1,4 --tasks 10000
    python -m bench.shards --scale-clients          # producers and workers x S
    python -m bench.shards --tenant-batches         # each submit batch one tenant's
    python -m bench.shards --shards 1,4 --one-shard --tenant-batches   # only shard 0 loaded
    python -m bench.shards --shards 1,4 --independent-groups   # the machine's baseline
    python -m bench.shards --ab-base /tmp/base/code --shards 1,2,4   # A/B, alternating
        # at each S: another commit's code (a tree with tsched/{statemachine,node,client},
        # from `git archive`) vs this one

The CPU of every node process together (routers and all replicas) per 1,000 lifecycles
is printed too: what the cluster's capacity follows, where a change may move work from
one role to another.

CPU per 1,000 lifecycles is printed twice: as measured (every CPU second the process
spent during the run) and net of idle (minus the process's own idle rate, measured on the
same cluster before the load, times the run's length). The first is what a deployment
pays; the second is the per-lifecycle work alone, which is what "flat across S" is about:
every shard replica also pays a fixed idle cost per second, whatever its share of the load.

It also prints Raft entries and API requests per 1,000 lifecycles of each shard (applied
seq and `/metrics` over the run): what each lifecycle asks of its shard. `--one-shard`
puts every task on shard 0 and leaves the others idle, so shard 0's CPU per lifecycle
shows what sharding adds to a replica's own path, apart from S busy shards sharing the
same cores.

`--independent-groups` also runs, after each S > 1, S separate single-group 3-node
clusters on the same cores, the same clients split among them (each group 1/G of the tasks,
producers and claim loops): no router, no shard code at all. Their leaders' CPU per 1,000
of their own lifecycles is what splitting the same load over S Raft groups costs on this
machine by itself (more processes sharing the cores, less concurrent work per group), the
baseline against which S's figures show what the sharding code adds.

The projection: a 5-node x 16-core cluster with R = 3 spends, per lifecycle, the leader's
CPU once, a follower's CPU R - 1 times and the routers' CPU (all of them, per lifecycle of
the cluster, as measured); 80 cores divided by that is the machine's bound, and one leader
process (one core) per shard bounds each shard.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.lib.api import Api, install_fast_loop  # noqa: E402
from bench.lib.cluster import LocalCluster, http_json, spread_tenants  # noqa: E402
from bench.lib.report import Report, add_common_flags  # noqa: E402
from bench.lifecycle import Config, describe_run, metric_sums, run_once  # noqa: E402

_TICKS_S = os.sysconf("SC_CLK_TCK")
PROJECT_NODES, PROJECT_CORES, PROJECT_R = 5, 16, 3
LATENCY_SAMPLES = 200


def proc_cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(rest[11]) + int(rest[12])) / _TICKS_S


def shard_processes(cluster: LocalCluster) -> dict[tuple[str, int | None], int]:
    """{(node, shard): pid}; shard None is the node's router (or, with one group, the node
    itself as shard 0)."""
    out: dict[tuple[str, int | None], int] = {}
    for node in cluster.ids:
        pid = cluster.pid(node)
        if cluster.shards == 1:
            out[(node, 0)] = pid
            continue
        out[(node, None)] = pid
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            kids = []
        for kid in kids:
            with open(f"/proc/{kid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if b"--shard" in argv:
                out[(node, int(argv[argv.index(b"--shard") + 1]))] = kid
    return out


def _cluster_shards(cluster: LocalCluster) -> list[dict]:
    """`GET /v1/cluster`'s shards (one group: itself as shard 0), each with its nodes."""
    code, body = http_json("GET", cluster.url(cluster.ids[0]) + "/v1/cluster", timeout_s=10)
    if code != 200:
        raise RuntimeError(f"/v1/cluster answered {code}")
    return body.get("shards") or [{"shard": 0, "leader": body["leader"], "nodes": body["nodes"]}]


def leaders(shards: list[dict]) -> dict[int, str]:
    return {s["shard"]: s["leader"] for s in shards}


def applied_seqs(shards: list[dict]) -> dict[int, int]:
    """Each shard's highest applied seq over its replicas: one per Raft entry applied."""
    return {s["shard"]: max((n.get("applied_seq") or 0) for n in s["nodes"]) for s in shards}


def lifecycles_by_shard(cluster: LocalCluster, r: dict) -> dict[int, int]:
    """Completed lifecycles of a run per shard (a task id's first two hex digits)."""
    counts = {s: 0 for s in range(cluster.shards)}
    for head, n in r["by_prefix"].items():
        s = int(head, 16) if cluster.shards > 1 else 0
        counts[s] = counts.get(s, 0) + n
    return counts


# API requests served (`/v1/...`), per shard: with shards the routers label their shard
# processes' samples `shard="s"` and their own carry none (node/shards/merge.py).
_API_REQUESTS = re.compile(r'^tsched_http_request_duration_seconds_count\{(?:shard="(\d+)",)?'
                           r'method="\w+",route="/v1/[^"]*"\} (\S+)$', re.M)


async def api_requests(api: Api, cluster: LocalCluster) -> dict[int, float]:
    """Requests served so far by each shard's replicas (all nodes), routers excluded."""
    found = await metric_sums(api, cluster.urls, _API_REQUESTS)
    if cluster.shards == 1:
        return {0: found.get("", 0.0)}
    return {int(k): v for k, v in found.items() if k}


def per_1000(cluster: LocalCluster, r: dict, key: str) -> list[float]:
    """`r[key]` ({shard: count over the run}) per 1,000 of that shard's lifecycles."""
    counts = lifecycles_by_shard(cluster, r)
    return [n * 1000 / counts[s] for s, n in r[key].items() if counts.get(s)]


async def submit_latency(api: Api, urls: list[str], tenants: list[str], n: int) -> list[float]:
    out = []
    for i in range(n):
        body = {"task_type": "lat", "delay_s": 3600}
        if tenants:
            body["tenant"] = tenants[i % len(tenants)]
        t0 = time.perf_counter()
        await api.submit_one(urls[i % len(urls)], body)
        out.append((time.perf_counter() - t0) * 1000)
    return out


IDLE_S = 5.0


def idle_cpu(cluster: LocalCluster, report: Report, tag: str) -> dict:
    """CPU the node processes use with no load (Raft ticks, timers), over IDLE_S: the
    cores used in all, and {(node, shard): CPU seconds per second} per process."""
    procs = shard_processes(cluster)
    before = {k: proc_cpu_s(p) for k, p in procs.items()}
    time.sleep(IDLE_S)
    rates = {k: (proc_cpu_s(p) - before[k]) / IDLE_S for k, p in procs.items()}
    report.figure(f"idle_cpu_cores_{tag}", [sum(rates.values())], "")
    report.note(f"idle, per process: {max(rates.values()) * 1000:.0f} ms/s at most, "
                f"{len(rates)} processes")
    return rates


async def measure(cluster: LocalCluster, cfg: Config, runs: int, report: Report) -> dict:
    procs = shard_processes(cluster)
    async with Api() as api:
        await run_once(api, cluster.urls, replace(cfg, tasks=min(2000, cfg.tasks)), "warmup")
        results = []
        for i in range(runs):
            before = {k: proc_cpu_s(p) for k, p in procs.items()}
            seqs = applied_seqs(_cluster_shards(cluster))
            served = await api_requests(api, cluster)
            r = await run_once(api, cluster.urls, cfg)
            r["cpu_s"] = {k: proc_cpu_s(p) - before[k] for k, p in procs.items()}
            shards = _cluster_shards(cluster)
            r["entries"] = {k: n - seqs.get(k, 0) for k, n in applied_seqs(shards).items()}
            r["requests"] = {k: n - served.get(k, 0.0)
                             for k, n in (await api_requests(api, cluster)).items()}
            r["leaders"] = leaders(shards)
            r["cpu_ms_per_task"] = float("nan")
            report.note(describe_run(i + 1, r).split(";  ")[0])
            results.append(r)
        lat = await submit_latency(api, cluster.urls, list(cfg.tenants), LATENCY_SAMPLES)
    return {"runs": results, "latency_ms": lat}


def per_shard_cpu(cluster: LocalCluster, r: dict, idle: dict | None = None
                  ) -> dict[str, list[float]]:
    """CPU ms per 1,000 lifecycles of each shard's leader, followers and the routers; with
    `idle` ({(node, shard): CPU s per s}), net of each process's idle rate over the run."""
    if idle is not None:
        r = dict(r, cpu_s={k: max(0.0, cpu - idle.get(k, 0.0) * r["elapsed_s"])
                           for k, cpu in r["cpu_s"].items()})
    counts = lifecycles_by_shard(cluster, r)
    out = {"leader": [], "follower": [], "router": []}
    routers = 0.0
    for (node, shard), cpu in r["cpu_s"].items():
        if shard is None:
            routers += cpu
            continue
        if not counts.get(shard):
            continue                # an idle shard (--one-shard): no lifecycles to divide by
        per_k = cpu * 1000 / (counts[shard] / 1000)
        out["leader" if r["leaders"].get(shard) == node else "follower"].append(per_k)
    if cluster.shards > 1:     # every router together, per 1,000 lifecycles of the cluster
        out["router"].append(routers * 1000 / max(r["completed"] / 1000, 1e-9))
    return out


def project(leader_ms: float, follower_ms: float, router_ms: float, report: Report) -> None:
    """The projection's arithmetic, printed step by step (ms of CPU per 1,000 lifecycles)."""
    per_k = leader_ms + (PROJECT_R - 1) * follower_ms + router_ms
    cores = PROJECT_NODES * PROJECT_CORES
    machine_bound = cores * 1000 / per_k * 1000
    shard_bound = 1000 / leader_ms * 1000
    shards_needed = machine_bound / shard_bound
    report.note(f"projection: {PROJECT_NODES} nodes x {PROJECT_CORES} cores, R = {PROJECT_R}")
    report.note(f"  CPU per 1,000 lifecycles = leader {leader_ms:.0f} ms + {PROJECT_R - 1} x "
                f"follower {follower_ms:.0f} ms + router {router_ms:.0f} ms = {per_k:.0f} ms")
    report.note(f"  machine bound = {cores} cores x 1,000 ms / {per_k:.0f} ms x 1,000 "
                f"= {machine_bound:,.0f} lifecycles/s")
    report.note(f"  one shard's bound (its leader on one core) = 1,000 ms / {leader_ms:.0f} ms "
                f"x 1,000 = {shard_bound:,.0f} lifecycles/s; the machine bound needs "
                f"{shards_needed:.1f} shards (up to 64)")
    report.figure("projected_lifecycles_per_s_5x16_R3",
                  [min(machine_bound, shard_bound * 64)], "/s", ">= 100,000")


def run_shards(s: int, args, cfg: Config, report: Report, env=None, label="") -> dict:
    tenants = tuple(spread_tenants(s, 2))
    if args.one_shard:       # shard 0's two tenants only: the other shards stay idle
        tenants = tenants[:2]
        label += "_one_loaded"
    if args.scale_clients:   # the same load on each shard at every S (more clients in all)
        cfg = replace(cfg, producers=cfg.producers * s, workers=cfg.workers * s)
        label += "_scaled"
    with LocalCluster(3, keep=args.keep, shards=s, env=env) as cluster:
        cluster.wait_writable()
        tag = f"s{s}{label}"
        idle = idle_cpu(cluster, report, tag)
        got = asyncio.run(measure(cluster, replace(cfg, tenants=tenants), args.runs, report))
        report.figure(f"lifecycles_per_s_{tag}", [r["tasks_per_s"] for r in got["runs"]], "/s")
        report.distribution(f"submit_ack_ms_{tag}", got["latency_ms"], "ms")
        out = {"tasks_per_s": [r["tasks_per_s"] for r in got["runs"]]}
        # The fewer lifecycles an entry carries, the more each pays of an entry's fixed cost.
        report.figure(f"raft_entries_per_1000_lifecycles_{tag}",
                      [v for r in got["runs"] for v in per_1000(cluster, r, "entries")], "")
        # Counted at every replica that served one: at S = 1 a follower's forward counts twice.
        report.figure(f"shard_api_requests_per_1000_lifecycles_{tag}",
                      [v for r in got["runs"] for v in per_1000(cluster, r, "requests")], "")
        # What the cluster's capacity follows (a trade between the roles shows here): every
        # node process's CPU, routers and all replicas (not the snapshot children), per
        # 1,000 lifecycles of the run.
        report.figure(f"cluster_cpu_ms_per_1000_lifecycles_{tag}",
                      [sum(r["cpu_s"].values()) * 1e6 / max(r["completed"], 1)
                       for r in got["runs"]], "ms")
        for suffix, rates in (("", None), ("_net_of_idle", idle)):
            cpu = [per_shard_cpu(cluster, r, rates) for r in got["runs"]]
            for role in ("leader", "follower", "router"):
                values = [v for c in cpu for v in c[role]]
                if values:
                    out[role + suffix] = report.figure(
                        f"{role}_cpu_ms_per_1000_lifecycles{suffix}_{tag}", values, "ms")
        return out


async def _measure_groups(clusters: list[LocalCluster], cfg: Config, runs: int,
                          report: Report) -> dict[str, list[float]]:
    """Each group loaded at once by its share of the clients; per run, every group
    leader's and follower's CPU per 1,000 of that group's lifecycles, and the total rate."""
    out: dict[str, list[float]] = {"rate": [], "leader": [], "follower": []}
    async with Api() as api:
        for c in clusters:
            await run_once(api, c.urls, replace(cfg, tasks=min(1000, cfg.tasks)), "warmup")
        for i in range(runs):
            procs = [shard_processes(c) for c in clusters]
            heads = [leaders(_cluster_shards(c))[0] for c in clusters]
            before = [{k: proc_cpu_s(p) for k, p in ps.items()} for ps in procs]
            got = await asyncio.gather(*(run_once(api, c.urls, cfg) for c in clusters))
            for ps, b, head, r in zip(procs, before, heads, got):
                for key, pid in ps.items():
                    per_k = (proc_cpu_s(pid) - b[key]) * 1e6 / max(r["completed"], 1)
                    out["leader" if key[0] == head else "follower"].append(per_k)
            total = sum(r["completed"] for r in got)
            out["rate"].append(total / max(r["elapsed_s"] for r in got))
            report.note(f"run {i + 1}: {out['rate'][-1]:,.0f} lifecycles/s over "
                        f"{len(clusters)} group(s)")
    return out


def run_groups(g: int, args, cfg: Config, report: Report) -> None:
    share = replace(cfg, tasks=cfg.tasks // g, producers=max(1, cfg.producers // g),
                    workers=max(1, cfg.workers // g))
    with contextlib.ExitStack() as stack:
        clusters = [stack.enter_context(LocalCluster(3, keep=args.keep)) for _ in range(g)]
        for c in clusters:
            c.wait_writable()
        got = asyncio.run(_measure_groups(clusters, share, args.runs, report))
    tag = f"g{g}_independent"
    report.figure(f"lifecycles_per_s_{tag}", got["rate"], "/s")
    report.figure(f"leader_cpu_ms_per_1000_lifecycles_{tag}", got["leader"], "ms")
    report.figure(f"follower_cpu_ms_per_1000_lifecycles_{tag}", got["follower"], "ms")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shards", default="1,2,4", help="comma-separated shard counts")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tasks", type=int, default=Config().tasks)
    p.add_argument("--ab-base", help="PYTHONPATH of the code to compare with, at each S")
    p.add_argument("--rounds", type=int, default=2, help="A/B rounds, alternating")
    p.add_argument("--scale-clients", action="store_true",
                   help="producers and workers x S, so each shard sees the load of S = 1")
    p.add_argument("--tenant-batches", action="store_true",
                   help="each submit batch holds one tenant's tasks (tenants in turn), as a "
                        "producer per team would send them; default: every batch mixes "
                        "all tenants, so the router splits it over every shard")
    p.add_argument("--one-shard", action="store_true",
                   help="all tasks on shard 0's tenants: its replicas' CPU per lifecycle "
                        "without the other shards' load on the same cores")
    p.add_argument("--independent-groups", action="store_true",
                   help="after each S > 1, S separate single-group clusters sharing the "
                        "clients: what splitting the load costs without any shard code")
    p.add_argument("--keep", action="store_true")
    add_common_flags(p)
    args = p.parse_args(argv)
    loop_name = install_fast_loop()
    cfg = Config(tasks=args.tasks, tenant_batches=args.tenant_batches)
    counts = [int(x) for x in args.shards.split(",") if x]
    report = Report("shards: lifecycles, latency and per-process CPU", "bench.shards", args,
                    {"nodes": 3, "shards": counts, "runs": args.runs, **asdict(cfg),
                     "client_loop": loop_name, "ab_base": args.ab_base})
    report.start()
    if args.independent_groups:    # each S > 1 beside S separate groups, in turn
        for s in counts:
            run_shards(s, args, cfg, report)
            if s > 1:
                run_groups(s, args, cfg, report)
        report.finish()
        return 0
    if args.ab_base:
        for i in range(args.rounds):
            for s in counts:
                run_shards(s, args, cfg, report, env={"PYTHONPATH": args.ab_base},
                           label=f"_base_r{i + 1}")
                run_shards(s, args, cfg, report, label=f"_this_r{i + 1}")
        report.finish()
        return 0
    measured = {s: run_shards(s, args, cfg, report) for s in counts}
    top = measured[max(counts)]
    if all(k in top for k in ("leader", "follower", "router")):
        project(top["leader"], top["follower"], top["router"], report)
    report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
