"""One harness run: start the cluster, run workload + nemesis, heal, drain, collect the
final state, check, and write DIR/summary.json."""
from __future__ import annotations

import asyncio
import json
import os
import random
import time

import aiohttp

from . import checker
from .cluster import Cluster
from .disks import SmallDisks
from .history import History, read
from .nemesis import FAULTS, Nemesis
from .workload import TENANT_CAPS, Api, Workload

LEADER_WAIT_S = 30.0
DRAIN_WAIT_S = 60.0            # with no progress (the leader applies nothing)
DRAIN_WAIT_MAX_S = 300.0       # however steady the progress
CONVERGE_WAIT_S = 30.0
POLL_S = 0.2
LIST_PAGE = 1000
HTTP_TIMEOUT_S = 5.0
DIGEST_SAMPLE_EVERY_S = 2.0
READ_SAMPLE_EVERY_S = 0.5      # one read of an acknowledged task per live node


async def _get(session, url: str):
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as r:
            return r.status, await r.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError):
        return None, None


async def _poll(cond, timeout_s: float) -> bool:
    """Wait until the async `cond()` holds or the deadline passes."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if await cond():
            return True
        await asyncio.sleep(POLL_S)
    return False


async def wait_for_leader(cluster: Cluster, session) -> bool:
    """A ready leader; with shards, a leader in every shard."""
    async def ready():
        for url in cluster.direct_urls.values():
            if cluster.shards == 1:
                status, body = await _get(session, url + "/readyz")
                if status == 200:
                    return True
                continue
            status, body = await _get(session, url + "/v1/cluster")
            shards = body.get("shards") if status == 200 else None
            if shards and all(s.get("leader") for s in shards):
                return True
        return False
    return await _poll(ready, LEADER_WAIT_S)


async def replica_states(cluster: Cluster, session, via: str, timeout_s: float = HTTP_TIMEOUT_S
                         ) -> list[dict] | None:
    """Every shard replica's {node, shard, applied_seq, digest}, as one node's router sees
    them (each shard process asks its peers); None when that node does not answer."""
    try:
        async with session.get(cluster.direct_urls[via] + "/v1/cluster",
                               timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            body = await r.json(content_type=None) if r.status == 200 else None
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError):
        return None
    if not body or not body.get("shards"):
        return None
    return [{"node": n["id"], "shard": s["shard"], "applied_seq": n["applied_seq"],
             "digest": n["digest"]}
            for s in body["shards"] for n in s["nodes"] if n.get("digest")]


async def _ready_leader_url(cluster: Cluster, session) -> str | None:
    """The ready leader's address; with shards, a ready router's (it reads every shard at
    its leader)."""
    if cluster.shards != 1:
        for url in cluster.direct_urls.values():
            status, _ = await _get(session, url + "/readyz")
            if status == 200:
                return url
        return None
    for url in cluster.direct_urls.values():
        status, st = await _get(session, url + "/v1/cluster/self")
        if status == 200 and st.get("role") == "leader" and st.get("ready"):
            return url
    return None


async def _has_ready_leader(cluster: Cluster, session) -> bool:
    return await _ready_leader_url(cluster, session) is not None


async def drain(cluster: Cluster, session) -> bool:
    """True once no task is pending or running (workers finish what the run left).

    Both lists are read from the ready leader (a node rejoining empty has no tasks yet),
    and count only when the leader applied nothing between the two reads: a lease expiring
    in between moves a task from running to pending, and two separate empty answers would
    then miss it."""
    seen = {"seq": None, "progress_at": time.monotonic()}

    async def empty():
        url = await _ready_leader_url(cluster, session)
        if url is None:
            return False
        seqs = set()
        for state in ("pending", "running"):
            status, body = await _get(session, f"{url}/v1/tasks?state={state}&limit=1")
            if status != 200:
                return False
            seqs.add(body.get("applied_seq") or tuple(sorted((body.get("applied_seqs") or {}).items())))
            if body.get("tasks"):
                _note_progress(seen, seqs.pop())
                return False
        return len(seqs) == 1

    async def empty_or_stalled():
        # Workers that still make progress (a backlog of catch-up fires on a loaded machine
        # drains at the cron worker's pace) get more time; a stall of DRAIN_WAIT_S ends it.
        return await empty() or time.monotonic() - seen["progress_at"] > DRAIN_WAIT_S
    return await _poll(empty_or_stalled, DRAIN_WAIT_MAX_S) and await empty()


def _note_progress(seen: dict, seq) -> None:
    if seq != seen["seq"]:
        seen["seq"], seen["progress_at"] = seq, time.monotonic()


async def converge(cluster: Cluster, session, samples: list) -> bool:
    """Sample every node's (applied_seq, digest) until all report the same seq (with
    shards: in every shard)."""
    async def same_seq():
        if cluster.shards != 1:
            states = await replica_states(cluster, session, cluster.ids[0])
            if states is None or len(states) != cluster.shards * len(cluster.ids):
                return False
            samples.extend(states)
            seqs = {(st["shard"], st["applied_seq"]) for st in states}
            return len(seqs) == cluster.shards
        seqs = set()
        for nid, url in cluster.direct_urls.items():
            status, st = await _get(session, url + "/v1/cluster/self")
            if status != 200:
                return False
            samples.append({"node": nid, "applied_seq": st["applied_seq"],
                            "digest": st["digest"]})
            seqs.add(st["applied_seq"])
        return len(seqs) == 1
    return await _poll(same_seq, CONVERGE_WAIT_S)


async def sample_digests(cluster: Cluster, session, samples: list, stop: asyncio.Event) -> None:
    """During the run too: replicas at one applied_seq must agree at any time."""
    while not stop.is_set():
        for nid, url in cluster.direct_urls.items():
            node = cluster.nodes[nid]
            if not node.alive or node.paused:
                continue
            if cluster.shards != 1:
                states = await replica_states(cluster, session, nid, timeout_s=2.0)
                samples.extend(dict(st, phase="run") for st in states or ())
                break      # one router sees every shard's replicas
            try:
                async with session.get(url + "/v1/cluster/self",
                                       timeout=aiohttp.ClientTimeout(total=1.0)) as r:
                    st = await r.json(content_type=None) if r.status == 200 else None
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError):
                st = None
            if st:
                samples.append({"node": nid, "applied_seq": st["applied_seq"],
                                "digest": st["digest"], "phase": "run"})
        try:
            await asyncio.wait_for(stop.wait(), DIGEST_SAMPLE_EVERY_S)
        except asyncio.TimeoutError:
            pass


async def _status_seq(session, url: str) -> int | None:
    try:
        async with session.get(url + "/v1/cluster/self",
                               timeout=aiohttp.ClientTimeout(total=1.0)) as r:
            return (await r.json(content_type=None))["applied_seq"] if r.status == 200 else None
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, OSError):
        return None


async def sample_reads(cluster: Cluster, session, acked_seq: dict, rng: random.Random,
                       samples: list, stop: asyncio.Event) -> None:
    """Read acknowledged tasks from every node directly, with the node's applied_seq just
    before the read: a node that had applied a task's submit and then says it does not
    exist serves from a diverged replica (checker.check_diverged_reads)."""
    while not stop.is_set():
        ids = list(acked_seq)
        for nid, url in cluster.direct_urls.items():
            node = cluster.nodes[nid]
            if not ids or not node.alive or node.paused:
                continue
            tid = rng.choice(ids)
            before = await _status_seq(session, url)
            status, body = await _get(session, f"{url}/v1/tasks/{tid}")
            if before is not None and status in (200, 404):
                samples.append({"node": nid, "task_id": tid, "ack_seq": acked_seq[tid],
                                "seq_before": before, "status": status,
                                "seq_after": (body or {}).get("applied_seq")})
        try:
            await asyncio.wait_for(stop.wait(), READ_SAMPLE_EVERY_S)
        except asyncio.TimeoutError:
            pass


async def final_tasks(cluster: Cluster, session) -> dict:
    """Every task, read from the ready leader (a node may have stopped on damaged storage,
    and one rejoining empty has no tasks yet)."""
    url = None
    if await _poll(lambda: _has_ready_leader(cluster, session), LEADER_WAIT_S):
        url = await _ready_leader_url(cluster, session)
    if url is None:
        raise RuntimeError("listing tasks failed: no ready leader at the end of the run")
    tasks, cursor = {}, None
    while True:
        q = f"?limit={LIST_PAGE}" + (f"&cursor={cursor}" if cursor else "")
        status, body = await _get(session, f"{url}/v1/tasks{q}")
        if status != 200:
            raise RuntimeError(f"listing tasks failed: {status} {body}")
        for t in body["tasks"]:
            tasks[t["task_id"]] = t
        cursor = body.get("next_cursor")
        if not cursor:
            return tasks


async def _run(out_dir: str, duration_s: float, seed: int, n_nodes: int,
               failpoints: tuple[str, ...], faults: tuple[str, ...], shards: int,
               code: str | None = None) -> dict:
    rng = random.Random(seed)
    cluster = Cluster(out_dir, n_nodes, failpoints, shards=shards,
                      disks=SmallDisks() if "disk_full" in faults else None, code=code)
    history = History(os.path.join(out_dir, "history.jsonl"))
    final = {"tasks": {}, "digests": [], "converged": False}
    try:
        cluster.start_all()
        connector = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(connector=connector) as session:
            if not await wait_for_leader(cluster, session):
                raise RuntimeError(f"no ready leader within {LEADER_WAIT_S}s; see {out_dir}/n*.log")
            api = Api(cluster.client_urls, history, session)
            workload = Workload(api, random.Random(rng.random()), cluster.ids,
                                tenant_caps=tenants_for(shards))
            await workload.setup()
            nemesis = Nemesis(cluster, history, random.Random(rng.random()), session, faults)
            workload.start()
            nemesis_task = asyncio.ensure_future(nemesis.run())
            sampling = asyncio.Event()
            sampler = asyncio.ensure_future(
                sample_digests(cluster, session, final["digests"], sampling))
            final["reads"] = []
            reader = asyncio.ensure_future(sample_reads(
                cluster, session, workload.shared.acked_seq, random.Random(rng.random()),
                final["reads"], sampling))
            await asyncio.sleep(duration_s)
            nemesis.stop()
            await nemesis_task
            sampling.set()
            await sampler
            await reader
            await nemesis.heal_everything()
            history.event("nemesis", "healed", "note")
            await workload.stop_schedule()
            workload.stop_producing()
            final["drained"] = await drain(cluster, session)
            await workload.read_schedule()      # the last fire records
            await workload.stop()
            final["converged"] = await converge(cluster, session, final["digests"])
            final["tasks"] = await final_tasks(cluster, session)
            final["exited"] = cluster.exited_unexpectedly()
            final["sink_rejected"] = workload.sink.rejected
            final["proxy_bytes"] = {name: {"forwarded": link.bytes_forwarded,
                                           "dropped": link.bytes_dropped}
                                    for name, link in cluster.hub.links.items()}
    finally:
        history.close()
        cluster.close()
        with open(os.path.join(out_dir, "final.json"), "w", encoding="utf-8") as f:
            json.dump(final, f)
    return final


def tenants_for(shards: int) -> dict[str, int]:
    """The workload's tenants and caps; with shards, unlimited tenants are added until
    every shard has one, so every shard's guarantees are exercised."""
    from tsched.node.topology import shard_of_tenant
    caps = dict(TENANT_CAPS)
    i = len(caps)
    while {shard_of_tenant(t, shards) for t in caps} != set(range(shards)):
        i += 1
        if shard_of_tenant(f"t{i}", shards) not in {shard_of_tenant(t, shards) for t in caps}:
            caps[f"t{i}"] = 0
    return caps


def run(out_dir: str, duration_s: float, seed: int, n_nodes: int = 3,
        failpoints: tuple[str, ...] = (), faults: tuple[str, ...] = FAULTS,
        shards: int = 1, code: str | None = None) -> dict:
    """Run, check and summarise; returns the summary (also in DIR/summary.json). `code`: a
    folder holding an installed `tsched/` to run instead of the checkout (`snapshot_code`)."""
    os.makedirs(out_dir, exist_ok=True)
    final = asyncio.run(_run(out_dir, duration_s, seed, n_nodes, failpoints, faults, shards,
                             code))
    report = checker.check(read(os.path.join(out_dir, "history.jsonl")), final)
    summary = checker.write_summary(out_dir, seed, duration_s, report)
    if not report["valid"]:
        print(f"INVALID run: seed={seed} history={out_dir}/history.jsonl "
              f"violations={out_dir}/violations.json")
    return summary
