"""The nemesis: one fault at a time, chosen and timed from the seed, each healed after a
while; stopping heals everything so the run ends with a healed quiet period.

Every fault is recorded in the history as a `nemesis` operation (its invoke marks the
start) followed by a `heal` operation (its ok marks the end), which is how the checker
knows when faults were active.
"""
from __future__ import annotations

import asyncio
import os
import random
from collections import Counter

import aiohttp

from tsched.node.raft.rejoin import MARKER_NAME
from tsched.node.topology import shifted
from tsched.node.config import internal_http

from .cluster import Cluster
from .history import OK, History
from .workload import LEASE_S

FAULTS = ("partition", "isolate_leader", "bridge", "one_way", "kill", "kill_all", "pause",
          "clock", "delay", "client_reset", "corrupt", "disk_full", "membership")
QUIET_S = (2.0, 4.0)          # between faults
HOLD_S = (3.0, 8.0)           # how long a fault lasts
PAUSE_PAST_LEASE_S = (1.5, 3.0)
CLOCK_JUMPS_MS = (-20_000, -5_000, 5_000, 20_000, 40_000)
DELAY_MS = (20, 150)
STATUS_TIMEOUT_S = 1.0
START_WAIT_S = 30.0            # a restarted node reads its storage within this, loaded or not
POLL_S = 0.2
CORRUPT_BYTES = 20             # flipped in a stopped node's log or snapshot
LMDB_META_BYTES = 2 * 4096     # LMDB's two meta pages: the flips go past them
REMOVE_WAIT_S = 60.0           # a membership fault's heal: until the joined node is removed


class Nemesis:
    def __init__(self, cluster: Cluster, history: History, rng: random.Random,
                 session: aiohttp.ClientSession, faults: tuple[str, ...] = FAULTS) -> None:
        self.cluster = cluster
        self.history = history
        self.rng = rng
        self.session = session
        self.faults = faults
        self.counts: Counter = Counter()
        self.joined = 0                 # nodes joined by the membership fault
        self._stop = asyncio.Event()

    # --- what the cluster looks like --------------------------------------------------------

    async def leader(self) -> str | None:
        """The node that says it leads (highest term wins), asked directly, not proxied."""
        best = None
        for nid in self.cluster.ids:
            node = self.cluster.nodes[nid]
            if not node.alive or node.paused:
                continue
            try:
                async with self.session.get(self.cluster.direct_urls[nid] + "/v1/cluster/self",
                                            timeout=aiohttp.ClientTimeout(total=STATUS_TIMEOUT_S)) as r:
                    st = await r.json(content_type=None)
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError):
                continue
            if st.get("role") == "leader" and (best is None or st.get("term", 0) > best[0]):
                best = (st.get("term", 0), nid)
        return best[1] if best else None

    async def leader_or_any(self) -> str:
        return await self.leader() or self.rng.choice(self.cluster.ids)

    async def _serving_or_stopped(self, nid: str) -> None:
        """Until `nid` answers HTTP (it read its storage: the log is checked at start, the
        snapshot restored, before the node listens) or has exited; at most START_WAIT_S.
        With shards, until each of its shard replicas answers: its router answers at once,
        before a replica has read its storage (a replica stopping on damage after this
        returned stopped the node after the run's last heal, and it was never brought back)."""
        end = asyncio.get_running_loop().time() + START_WAIT_S
        urls = self._own_health_urls(nid)
        while self.cluster.nodes[nid].alive and asyncio.get_running_loop().time() < end:
            if all([await self._answers_200(u) for u in urls]):
                return
            await asyncio.sleep(POLL_S)

    # --- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        while not self._stop.is_set():
            if await self._wait(self.rng.uniform(*QUIET_S)):
                return
            name = self.rng.choice(self.faults)
            heal = await self._inject(name)
            hold = self._hold_s(name)
            await self._wait(hold)
            await self._heal(name, heal)

    def stop(self) -> None:
        self._stop.set()

    async def _wait(self, seconds: float) -> bool:
        """Sleep, but wake at once when stopped; True when stopped."""
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
            return True
        except asyncio.TimeoutError:
            return False

    def _hold_s(self, name: str) -> float:
        if name == "kill_all":
            return self.rng.uniform(0.5, 2.0)
        if name == "pause":
            return LEASE_S + self.rng.uniform(*PAUSE_PAST_LEASE_S)
        return self.rng.uniform(*HOLD_S)

    async def _inject(self, name: str):
        op = self.history.invoke("nemesis", name, None)
        args, heal = await getattr(self, f"_fault_{name}")()
        self.counts[name] += 1
        # the checker widens a clock fault's window by its offset, read from this result
        self.history.complete(op, OK, "nemesis", name, result=args)
        return heal

    async def _heal(self, name: str, heal) -> None:
        op = self.history.invoke("nemesis", "heal", None, fault=name)
        await heal()
        self.history.complete(op, OK, "nemesis", "heal", result={"fault": name})

    async def heal_everything(self) -> None:
        """The end of the run: every link passes, every node runs with a true clock."""
        self.cluster.hub.heal_all()
        for nid, node in self.cluster.nodes.items():
            self.cluster.set_clock_offset(nid, 0)
            if node.paused:
                self.cluster.resume(nid)
            if not node.alive:
                self.cluster.start(nid)

    # --- faults: each returns (what it did, how to heal it) ---------------------------------

    def _split(self) -> tuple[list[str], list[str]]:
        ids = self.cluster.ids[:]
        self.rng.shuffle(ids)
        k = self.rng.randint(1, len(ids) // 2)
        return ids[:k], ids[k:]

    def _cut(self, a, b) -> list[str]:
        links = self.cluster.links_between(a, b)
        self.cluster.hub.set_many(links, "drop")
        return links

    def _restore(self, links):
        async def heal():
            self.cluster.hub.set_many(links, "pass")
        return heal

    async def _fault_partition(self):
        minority, majority = self._split()
        return {"groups": [minority, majority]}, self._restore(self._cut(minority, majority))

    async def _fault_isolate_leader(self):
        leader = await self.leader_or_any()
        rest = [n for n in self.cluster.ids if n != leader]
        return {"isolated": leader}, self._restore(self._cut([leader], rest))

    async def _fault_bridge(self):
        ids = self.cluster.ids[:]
        self.rng.shuffle(ids)
        bridge, rest = ids[0], ids[1:]
        half = len(rest) // 2
        a, b = rest[:half], rest[half:]
        return {"bridge": bridge, "sides": [a, b]}, self._restore(self._cut(a, b))

    async def _fault_one_way(self):
        """Messages flow only src -> dst: the leader that cannot hear, or a random pair."""
        if self.rng.random() < 0.5:
            src = await self.leader_or_any()
            pairs = [(src, n) for n in self.cluster.ids if n != src]
        else:
            src, dst = self.rng.sample(self.cluster.ids, 2)
            pairs = [(src, dst)]
        links = []
        for s, d in pairs:
            for link, dialler in self.cluster.pair_links(s, d):
                forward = "up" if dialler == s else "down"
                self.cluster.hub.set(link, "one_way", forward=forward)
                links.append(link)
        return {"flows": [f"{s}->{d}" for s, d in pairs]}, self._restore(links)

    async def _fault_kill(self):
        nid = await self.leader_or_any() if self.rng.random() < 0.5 else \
            self.rng.choice(self.cluster.ids)
        self.cluster.kill(nid)

        async def heal():
            self.cluster.start(nid)
            await self._started([nid])
        return {"node": nid}, heal

    async def _fault_kill_all(self):
        """Every node at once (a power cut): only what reached the disk survives."""
        for nid in self.cluster.ids:
            self.cluster.kill(nid)

        async def heal():
            for nid in self.cluster.ids:
                self.cluster.start(nid)
            await self._started(self.cluster.ids)
        return {"nodes": list(self.cluster.ids)}, heal

    async def _started(self, nids: list[str]) -> None:
        """A restart heals once the restarted processes are up: until each node's own
        replicas answer /healthz (a sharded node's router answers before its shard
        processes have started), or it has exited; at most START_WAIT_S. Starting the
        processes is the machine's time, not the cluster's: on a loaded 2-core machine a
        power cut's nine processes of a 2-shard cluster took 4 s to listen, and the
        checker's grace after a heal (election, catch-up) began before they did."""
        end = asyncio.get_running_loop().time() + START_WAIT_S
        for nid in nids:
            urls = self._own_health_urls(nid)
            while self.cluster.nodes[nid].alive and asyncio.get_running_loop().time() < end:
                if all([await self._answers_200(u) for u in urls]):
                    break
                await asyncio.sleep(POLL_S)

    async def _fault_pause(self):
        nid = await self.leader_or_any()
        self.cluster.pause(nid)

        async def heal():
            self.cluster.resume(nid)
        return {"node": nid}, heal

    async def _fault_clock(self):
        nid = await self.leader_or_any()
        offset = self.rng.choice(CLOCK_JUMPS_MS)
        self.cluster.set_clock_offset(nid, offset)

        async def heal():
            self.cluster.set_clock_offset(nid, 0)
        return {"node": nid, "offset_ms": offset}, heal

    async def _fault_delay(self):
        links = [n for n in self.cluster.hub.links if n.startswith("raft:")]
        delay = self.rng.randint(*DELAY_MS)
        self.cluster.hub.set_many(links, "delay", delay_ms=delay)
        return {"delay_ms": delay}, self._restore(links)

    async def _fault_client_reset(self):
        nid = self.rng.choice(self.cluster.ids)
        link = self.cluster.http_link(nid)
        self.cluster.hub.set(link, "reset")
        return {"node": nid}, self._restore([link])

    async def _fault_corrupt(self):
        """Kill a node, flip bytes in its Raft log or its snapshot, start it again: it must
        stop on the damage (then it is reset) or, when the bytes missed live data, run on
        as before; never serve from a diverged state (the digest and read checks).

        Only while every other node holds its data: a node rejoining empty (or stopped on
        damage) counts as damaged, and damage to a majority at once is outside what Raft
        survives (it may hold the only copies of committed entries), so the cluster would
        rightly stay without a leader. Then the fault is skipped."""
        damaged = [n for n in self.cluster.ids if await self._damaged(n)]
        if (len(damaged) + 1) * 2 >= len(self.cluster.ids):
            async def nothing():
                pass
            return {"skipped": f"damaged already: {damaged}"}, nothing
        nid = self.rng.choice(self.cluster.ids)
        self.cluster.kill(nid)
        data_dir = self.cluster.data_dir(nid)
        dirs = [data_dir] + sorted(data_dir.glob("shard-*"))    # with shards: one per replica
        files = [str(f) for d in dirs for f in (d / "raft-log" / "data.mdb", d / "snapshot.bin")
                 if f.exists()]
        target = self.rng.choice(files) if files else None
        offsets = self._flip(target) if target else []
        self.cluster.start(nid)

        async def heal():
            # It stops on the damage when it reads it, which may be after this heal is
            # due (a slow start): wait, bounded, until it serves or has stopped. Stopped, it
            # is brought back as an operator would, empty (`tsnode --rejoin-empty`).
            await self._serving_or_stopped(nid)
            if not self.cluster.nodes[nid].alive:
                self.cluster.start_node(nid, "--rejoin-empty")
        return {"node": nid, "file": os.path.basename(target or ""), "offsets": offsets[:4]}, heal

    async def _fault_disk_full(self):
        """Fill one node's (small) disk: its next write fails and it must stop loudly (the
        majority goes on); healing frees the space and starts it again."""
        disks = self.cluster.disks
        if disks is None or not disks.mounted:
            reason = disks.refused if disks is not None else "no small disks"

            async def nothing():
                pass
            return {"skipped": reason}, nothing
        nid = self.rng.choice(sorted(disks.mounted))
        written = await asyncio.to_thread(disks.fill, nid)

        async def heal():
            disks.free(nid)
            # A node whose write just failed may still be stopping (its leadership handoff
            # takes up to a second): wait, bounded, until it serves or has exited, so that
            # it is started again (it was left stopped after the run's last heal once).
            await self._serving_or_stopped(nid)
            if not self.cluster.nodes[nid].alive:
                self.cluster.start(nid)
        return {"node": nid, "filled_bytes": written}, heal

    async def _fault_membership(self):
        """A membership change under a kill (DESIGN 6.2): a fresh node joins (`tsnode
        --join` through a live member's API) while, half the time, another node is killed
        (then the new node's own vote commits its addition); healing restarts the killed
        node, removes the joined one and stops it. The joined node is no member of `ids`:
        the workload, the other faults and the checker's final reads keep to the originals."""
        c = self.cluster
        self.joined += 1
        nid = f"m{self.joined}"
        via = await self.leader_or_any()
        killed = None
        if self.rng.random() < 0.5:
            killed = self.rng.choice([n for n in c.ids if n != via])
            c.kill(killed)
        c.join_extra(nid, via)

        async def heal():
            if killed is not None:
                c.start(killed)
            await self._joined_or_exited(nid)     # its join may still be asking to be added
            removed = await self._remove_member(nid)
            c.stop_extra(nid)
            if not removed:
                raise AssertionError(f"the joined node {nid} could not be removed in "
                                     f"{REMOVE_WAIT_S:.0f} s")
        return {"node": nid, "via": via, "killed": killed}, heal

    async def _joined_or_exited(self, nid: str) -> None:
        """Until the joining node serves HTTP (its join is done: it is a member) or has
        exited (the join was refused); at most REMOVE_WAIT_S. With shards, until each of
        its shard replicas serves (its router answers at once, and asks other nodes'
        replicas while its own are not up)."""
        end = asyncio.get_running_loop().time() + REMOVE_WAIT_S
        urls = self._own_health_urls(nid)
        while self.cluster.alive(nid) and asyncio.get_running_loop().time() < end:
            if all([await self._answers_200(u) for u in urls]):
                return
            await asyncio.sleep(POLL_S)

    def _own_health_urls(self, nid: str) -> list[str]:
        c = self.cluster
        if c.shards == 1:
            return [c.url(nid) + "/healthz"]
        return [f"http://{internal_http(shifted(c.raft[nid], s))}/healthz"
                for s in range(c.shards)]

    async def _answers_200(self, url: str) -> bool:
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=1)) as r:
                return r.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    async def _remove_member(self, nid: str) -> bool:
        """DELETE /v1/cluster/members/nid through any live member until it is gone (200, or
        404 once it is: a retried removal); a change in progress or no leader: again."""
        end = asyncio.get_running_loop().time() + REMOVE_WAIT_S
        while asyncio.get_running_loop().time() < end:
            for via in self.cluster.ids:
                if not self.cluster.nodes[via].alive:
                    continue
                try:
                    async with self.session.delete(
                            self.cluster.direct_urls[via] + f"/v1/cluster/members/{nid}",
                            timeout=aiohttp.ClientTimeout(total=30)) as r:
                        if r.status in (200, 404):
                            return True
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    pass
            await asyncio.sleep(POLL_S * 5)
        return False

    async def _damaged(self, nid: str) -> bool:
        """Stopped on damaged storage, or rejoining empty and not yet caught up. A node
        started with --rejoin-empty writes its marker only once it runs (slowly, on a busy
        machine): until it is seen serving without the marker it counts as damaged."""
        if self.cluster.stopped_on_damage(nid):
            return True
        data_dir = self.cluster.data_dir(nid)
        dirs = [data_dir] + sorted(data_dir.glob("shard-*"))
        if any((d / MARKER_NAME).exists() for d in dirs):
            return True
        if nid not in self.cluster.rejoin_started:
            return False
        if self.cluster.nodes[nid].alive and await self._answers(nid) \
                and not any((d / MARKER_NAME).exists() for d in dirs):
            self.cluster.rejoin_started.discard(nid)     # caught up: the marker is gone
            return False
        return True

    async def _answers(self, nid: str) -> bool:
        try:
            async with self.session.get(self.cluster.direct_urls[nid] + "/healthz",
                                        timeout=aiohttp.ClientTimeout(total=STATUS_TIMEOUT_S)):
                return True
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    def _flip(self, path: str) -> list[int]:
        size = os.path.getsize(path)
        low = LMDB_META_BYTES if path.endswith(".mdb") else 0
        if size <= low:
            return []
        offsets = sorted(self.rng.randrange(low, size) for _ in range(CORRUPT_BYTES))
        with open(path, "r+b") as f:
            for at in offsets:
                f.seek(at)
                byte = f.read(1)
                f.seek(at)
                f.write(bytes([byte[0] ^ 0xFF]))
        return offsets
