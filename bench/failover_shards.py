"""Failover with several shards (`python -m bench.failover --shards S`): SIGKILL of a node
that leads shards, under load; for each shard it led, the time to the first successful
write to that shard and the first claim of one of that shard's tasks.

Before each kill every shard has a leader and the leaders are spread (no node leads more
than ceil(S / N) shards, DESIGN.md section 13); the node leading the most shards is killed.
Probes run on every surviving node, as in `bench.failover`: per shard it led, single-task
submits of a tenant of that shard (1 s timeout each) until one is acknowledged, and claims
for that shard's probe tasks until one returns a task. The clocks start at the kill. The
node is then restarted, ready (every local replica caught up) and the spread restored
before the next kill.
"""
from __future__ import annotations

import asyncio
import math
import time
import uuid

from bench.failover import PROBE_TIMEOUT_S, Background, first_success
from bench.lib.api import Api
from bench.lib.cluster import LocalCluster, http_json, spread_tenants
from bench.lib.report import Report

STABLE_WAIT_S = 120.0


def shard_leaders(cluster: LocalCluster, among: list[str]) -> dict[int, str | None]:
    """{shard: leader} from the first of `among` that answers `/v1/cluster`."""
    for node in among:
        try:
            code, body = http_json("GET", cluster.url(node) + "/v1/cluster", timeout_s=5)
        except OSError:
            continue
        if code == 200 and body.get("shards"):
            return {s["shard"]: s.get("leader") for s in body["shards"]}
    return {}


def wait_spread(cluster: LocalCluster) -> dict[int, str]:
    """Until every shard has a live leader and no node leads more than ceil(S / N)."""
    cap = math.ceil(cluster.shards / len(cluster.ids))
    deadline = time.monotonic() + STABLE_WAIT_S
    while time.monotonic() < deadline:
        leaders = shard_leaders(cluster, cluster.ids)
        led = [leaders.get(s) for s in range(cluster.shards)]
        if all(n in cluster.ids and cluster.alive(n) for n in led) \
                and max(led.count(n) for n in cluster.ids) <= cap:
            return leaders
        time.sleep(0.2)
    raise RuntimeError(f"leaders not spread within {STABLE_WAIT_S} s; logs in {cluster.root}")


def wait_ready(cluster: LocalCluster, node: str) -> None:
    deadline = time.monotonic() + STABLE_WAIT_S
    while time.monotonic() < deadline:
        st = cluster.readiness(node)
        if st and st["ready"]:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{node} not ready within {STABLE_WAIT_S} s; logs in {cluster.root}")


async def one_kill(api: Api, cluster: LocalCluster, bg: Background, k: int,
                   tenants: list[str]) -> dict:
    leaders = await asyncio.to_thread(wait_spread, cluster)
    counts = {n: list(leaders.values()).count(n) for n in cluster.ids}
    victim = max(cluster.ids, key=lambda n: counts[n])
    led = sorted(s for s, n in leaders.items() if n == victim)
    probe = {s: f"probe-{k}-s{s}-{uuid.uuid4().hex[:4]}" for s in led}
    for s in led:
        await api.submit(cluster.url(victim), [{"task_type": probe[s], "tenant": tenants[s]}] * 5,
                         timeout_s=10)
    survivors = [cluster.url(n) for n in cluster.ids if n != victim]
    bg.live[:] = survivors

    def write(s: int):
        async def attempt(base: str) -> bool:
            await api.submit_one(base, {"task_type": f"{probe[s]}-w", "tenant": tenants[s]},
                                 timeout_s=PROBE_TIMEOUT_S)
            return True
        return attempt

    def claim(s: int):
        async def attempt(base: str) -> bool:
            got = await api.claim(base, f"probe-{k}-{s}", [probe[s]], 1, 0.5,
                                  timeout_s=PROBE_TIMEOUT_S + 0.5)
            return bool(got)
        return attempt

    t_kill = time.perf_counter()
    await asyncio.to_thread(cluster.kill, victim)
    got = await asyncio.gather(*(first_success(write(s), survivors) for s in led),
                               *(first_success(claim(s), survivors) for s in led))
    writes, claims = got[:len(led)], got[len(led):]
    cluster.start_node(victim)
    await asyncio.to_thread(wait_ready, cluster, victim)
    bg.live[:] = cluster.urls
    return {"killed": victim, "shards": led,
            "write_s": [t - t_kill for t in writes], "claim_s": [t - t_kill for t in claims]}


async def measure(cluster: LocalCluster, kills: int, report: Report, batch: int,
                  pause_s: float) -> list[dict]:
    tenants = spread_tenants(cluster.shards, 1)
    async with Api() as api:
        bg = Background(api, cluster.urls, batch, pause_s, tenants)
        results = []
        async with bg.running(report):
            for k in range(kills):
                r = await one_kill(api, cluster, bg, k, tenants)
                per = ", ".join(f"shard {s}: write {w:.2f} s, claim {c:.2f} s"
                                for s, w, c in zip(r["shards"], r["write_s"], r["claim_s"]))
                report.note(f"kill {k + 1}: {r['killed']} led shards {r['shards']}: {per}")
                results.append(r)
    return results


def figures(results: list[dict], report: Report, target: str) -> None:
    writes = [w for r in results for w in r["write_s"]]
    report.figure("failover_first_write_s_per_shard", writes, "s", target)
    report.figure("failover_first_claim_s_per_shard",
                  [c for r in results for c in r["claim_s"]], "s")
    report.figure("failover_last_shard_first_write_s", [max(r["write_s"]) for r in results],
                  "s", target)
    report.distribution("failover_first_write_ms_all_shards", [w * 1000 for w in writes], "ms")
