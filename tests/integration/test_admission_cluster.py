"""Admission at the HTTP layer on a real 3-node cluster (DESIGN 14.2): a node with
`submits_in_progress_max` submits in progress answers the next ones 429 `overloaded`
(reason `busy`) with Retry-After at once, while those in progress still commit; nothing
acknowledged is lost, and reads, claims, completions and heartbeats are never refused this
way."""
from __future__ import annotations

import asyncio

import aiohttp
import httpx
import pytest

from tests.harness.cluster import Cluster, running
from tsched.statemachine.limits import API_LIMITS

pytestmark = pytest.mark.slow
IN_PROGRESS_MAX = API_LIMITS.submits_in_progress_max
FLOOD = IN_PROGRESS_MAX + 100
REFUSALS_WAIT_S = 60
# The submits in progress wait for their commit until the followers are resumed; on a
# busy machine the flood's connections may take a while, so they wait longer than 10 s.
# The leader keeps leading meanwhile: cut off from its followers it would step down after
# its leader fallback (1 s), and a flood that reached it later (a busy machine) would find
# no leader to take its submits, and so nothing in progress to refuse others for.
PATIENT_TOML = "\n[cluster.timeouts]\npropose_s = 60\nleader_fallback_s = 120\n"


@pytest.fixture
def cluster(tmp_path):
    yield from running(tmp_path, extra_toml=PATIENT_TOML)


async def _submit(session: aiohttp.ClientSession, url: str, i: int) -> tuple[int, dict, str]:
    async with session.post(f"{url}/v1/tasks", json={"task_type": "flood",
                                                     "payload": {"i": i}}) as r:
        return r.status, await r.json(), r.headers.get("Retry-After", "")


async def _post(session: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict]:
    async with session.post(url, json=body) as r:
        return r.status, await r.json()


def _worker_calls(session: aiohttp.ClientSession, url: str) -> list[asyncio.Future]:
    """A claim, a batch of completions and one of heartbeats (for a task that does not
    exist), sent at once."""
    gone = {"task_id": "no-such-task", "fencing_token": 1}
    return [asyncio.ensure_future(_post(session, url + path, body)) for path, body in (
        ("/v1/claims", {"worker_id": "w-busy", "task_types": ["flood"], "wait_s": 0}),
        ("/v1/completions", {"completions": [{**gone, "result": None}]}),
        ("/v1/heartbeats", {"heartbeats": [gone]}))]


async def _flood_while_stalled(cluster: Cluster, node: str, stalled: list[str]
                               ) -> tuple[list, list, int, list]:
    """FLOOD concurrent submits to `node` while `stalled` are paused (nothing can commit);
    once the refusals are in, a read and worker calls while it is busy; then resume them.
    Returns (answers, the answers before the resume, the read's status, the worker calls'
    answers)."""
    url = cluster.url(node)
    connector = aiohttp.TCPConnector(limit=0)     # a connection per submit: all at once
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        pending = [asyncio.ensure_future(_submit(session, url, i)) for i in range(FLOOD)]
        try:
            done: set = set()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + REFUSALS_WAIT_S
            while len(done) < FLOOD - IN_PROGRESS_MAX and loop.time() < deadline:
                done, _ = await asyncio.wait(pending, timeout=0.1)
            worker = _worker_calls(session, url)   # answered once they commit, never busy
            async with session.get(f"{url}/v1/tasks?limit=1") as r:   # reads still served
                read_status = r.status
            answered_while_stalled = [f.result()[0] if not f.exception() else repr(f.exception())
                                     for f in done]
        finally:
            for f in stalled:
                cluster.resume(f)
        return (await asyncio.gather(*pending), answered_while_stalled, read_status,
                await asyncio.gather(*worker))


def test_a_flood_at_a_stalled_node_is_refused_busy_at_once_and_nothing_is_lost(cluster):
    leader = cluster.wait_leader()
    followers = cluster.followers(leader)
    for f in followers:        # the leader cannot commit: every submit it takes stays in progress
        cluster.pause(f)
    answers, early, read_status, worker = asyncio.run(
        _flood_while_stalled(cluster, leader, followers))

    # nothing could commit, so every answer before the resume was a refusal: at least the
    # submits past IN_PROGRESS_MAX (more if the flood took over submit_wait_ms_max to
    # arrive, as on a busy machine: then the oldest one's wait refuses the later ones)
    assert early == [429] * len(early) and len(early) >= FLOOD - IN_PROGRESS_MAX, early
    assert read_status == 200
    # worker calls sent while it was busy were served, not refused: a leader cut off from
    # its followers may answer them `no_leader`, never `overloaded`
    for status, body in worker:
        assert status == 200 or (status, body["error"]["code"]) == (503, "no_leader"), worker
    refused = [(body, retry) for status, body, retry in answers if status == 429]
    accepted = [body for status, body, _ in answers if status == 201]
    assert len(refused) + len(accepted) == FLOOD, [a for a in answers if a[0] not in (201, 429)]
    assert accepted
    for body, retry in refused:
        assert body["error"]["code"] == "overloaded"
        details = body["error"]["details"]
        assert details["reason"] == "busy"
        # past the soft bound, these submits (not urgent) were refused after their body
        # was read; others in progress meanwhile may have taken the count past the bound
        assert (details.get("in_progress_max") == IN_PROGRESS_MAX <= details["in_progress"]
                or details["oldest_wait_ms"] >= API_LIMITS.submit_wait_ms_max), details
        assert retry == str(API_LIMITS.busy_retry_after_s)

    # every acknowledged submit is readable on another node once it has caught up
    seq = max(body["applied_seq"] for body in accepted)
    for body in accepted:
        status, task = cluster.call(followers[0], "GET",
                                    f"/v1/tasks/{body['task_id']}?min_seq={seq}")
        assert status == 200 and task["payload"] == body["payload"], task

    # the places were given back: the node takes submits again
    status, body = cluster.call(leader, "POST", "/v1/tasks", {"task_type": "flood"})
    assert status == 201, body
    # and /metrics counts each refusal, by its reason and tier
    metrics = httpx.get(cluster.url(leader) + "/metrics", timeout=10).text
    busy = [line for line in metrics.splitlines()
            if line.startswith('tsched_submits_shed_total{reason="busy",')]
    assert busy and sum(float(line.split()[-1]) for line in busy) == len(refused), busy
