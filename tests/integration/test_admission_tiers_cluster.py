"""Overload keeps the urgent (DESIGN 5.1, 14.2) on a real 3-node cluster: a node that is
busy (`submits_in_progress_max` submits in progress, none able to commit) still admits
submits whose every task has priority <= `urgent_priority_max`, and refuses the others
`busy`; /metrics counts the refusals by the tier of the refused submit's most urgent task.

The node is made busy as in test_admission_cluster.py: its followers are paused, so every
submit it admits stays in progress until they are resumed. Each refusal's details say how
many submits the node has in progress, which is how the test knows the urgent ones were
admitted while it was busy (no timing is asserted)."""
from __future__ import annotations

import asyncio

import aiohttp
import httpx
import pytest

from tests.harness.cluster import Cluster, running
from tsched.statemachine.limits import API_LIMITS

pytestmark = pytest.mark.slow
FILL = API_LIMITS.submits_in_progress_max      # priority-9 submits that make the node busy
URGENT = 8                                     # priority-0 submits sent while it is busy
WAIT_S = 90                                    # a bound on every wait, for a loaded machine
PROBE_WAIT_S = 5.0
# The leader keeps leading while its followers are paused (test_admission_cluster.py).
PATIENT_TOML = "\n[cluster.timeouts]\npropose_s = 120\nleader_fallback_s = 240\n"


@pytest.fixture
def cluster(tmp_path):
    yield from running(tmp_path, extra_toml=PATIENT_TOML)


async def _post(session: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict, str]:
    async with session.post(f"{url}/v1/tasks", json=body) as r:
        return r.status, await r.json(), r.headers.get("Retry-After", "")


def _task(priority: int, i: int) -> dict:
    return {"task_type": "tiered", "priority": priority, "payload": {"i": i}}


class Busy:
    """Submits sent to one node whose followers are paused: nothing it admits is answered
    until they are resumed."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url = session, url
        self.sent: list[asyncio.Future] = []
        self.low: list[asyncio.Future] = []         # priority 9: the fill and the probes

    def send(self, body: dict) -> asyncio.Future:
        fut = asyncio.ensure_future(_post(self.session, self.url, body))
        self.sent.append(fut)
        return fut

    def fill(self, n: int) -> None:
        self.low += [self.send(_task(9, i)) for i in range(n)]

    async def settled(self) -> int:
        """Send priority-9 probes until one is refused reporting as many submits in
        progress as there are unanswered ones: every submit sent is then at the node
        (none still on its way). A probe that is admitted (the node was not busy yet)
        stays unanswered like the others. Returns that number."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while True:
            probe = self.send(_task(9, -1))
            self.low.append(probe)
            # a refusal comes back at once on an idle machine; a loaded one with hundreds
            # of open submits may take seconds (an admitted probe stays unanswered)
            await asyncio.wait([probe], timeout=PROBE_WAIT_S)
            if probe.done():
                status, body, _ = probe.result()
                assert status == 429, body
                n = body["error"]["details"]["in_progress"]
                if n == sum(not f.done() for f in self.sent):
                    return n
            assert loop.time() < deadline, "the node's submits in progress never settled"
            await asyncio.sleep(0.05)


async def _busy_node_admits_the_urgent(cluster: Cluster, node: str, stalled: list[str]):
    url = cluster.url(node)
    connector = aiohttp.TCPConnector(limit=0)     # a connection per submit: all at once
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=WAIT_S * 3)) as session:
        busy = Busy(session, url)
        try:
            busy.fill(FILL)
            held = await busy.settled()        # busy: the last probe was refused
            urgent = [busy.send(_task(0, i)) for i in range(URGENT - 1)]
            urgent.append(busy.send({"tasks": [_task(0, 100), _task(3, 101)]}))  # all urgent
            mixed = await _post(session, url, {"tasks": [_task(0, 200), _task(9, 201)]})
            # every urgent submit is in progress beside the held ones: admitted while busy
            assert await busy.settled() == held + URGENT
            assert not any(f.done() for f in urgent), [f.result() for f in urgent if f.done()]
        finally:
            for f in stalled:
                cluster.resume(f)
        return (await asyncio.gather(*urgent), mixed, await asyncio.gather(*busy.low))


def _shed(metrics: str) -> dict[tuple[str, str], float]:
    out = {}
    for line in metrics.splitlines():
        if line.startswith("tsched_submits_shed_total{"):
            labels, value = line[len("tsched_submits_shed_total{"):].split("} ")
            reason, tier = (part.split("=")[1].strip('"') for part in labels.split(","))
            out[(reason, tier)] = float(value)
    return out


def test_a_busy_node_admits_urgent_submits_and_refuses_the_others(cluster):
    leader = cluster.wait_leader()
    followers = cluster.followers(leader)
    for f in followers:        # the leader cannot commit: what it admits stays in progress
        cluster.pause(f)
    urgent, mixed, low = asyncio.run(_busy_node_admits_the_urgent(cluster, leader, followers))

    for status, body, _ in urgent:       # committed once the followers came back
        assert status == 201, body
    priorities = sorted(t["priority"] for _, body, _ in urgent
                        for t in body.get("tasks", [body]))
    assert priorities == [0] * URGENT + [3]
    # a batch with one task that is not urgent is refused whole, as any busy refusal
    status, body, retry = mixed
    assert status == 429 and body["error"]["details"]["reason"] == "busy", body
    assert retry == str(API_LIMITS.busy_retry_after_s)
    refused = [(body["error"], retry) for status, body, retry in low if status == 429]
    assert refused and all(status in (201, 429) for status, _, _ in low), low
    for error, retry in refused:         # priority 9: refused, as before this rule
        assert error["code"] == "overloaded" and error["details"]["reason"] == "busy", error
        assert error["details"].get("in_progress_max") == API_LIMITS.submits_in_progress_max \
            or error["details"]["oldest_wait_ms"] >= API_LIMITS.submit_wait_ms_max, error
        assert retry == str(API_LIMITS.busy_retry_after_s)

    # /metrics: each refusal by the tier of its most urgent task (none was refused unread)
    shed = _shed(httpx.get(cluster.url(leader) + "/metrics", timeout=30).text)
    assert shed[("busy", "low")] == len(refused), shed
    assert shed[("busy", "critical")] == 1 and shed[("busy", "high")] == 0, shed
    assert shed[("busy", "unknown")] == 0 and shed[("queue_full", "critical")] == 0, shed
