"""Keyed limits on one shared 3-node cluster with real Workers (issue 46, "Done when"),
scaled to run in seconds: a rate limit checked over every sliding window of the claim
times in the attempt history, with unlimited tasks finishing first and the leader
SIGKILLed mid-run; concurrency 2 per account over 20 accounts, checked over the attempts'
run intervals; RateLimited(after_s=2) pausing every worker without counting the attempt;
and tsctl reading the limits. Times compared are the attempts' (the state machine's clock),
never this process's."""
from __future__ import annotations

import datetime as dt
import json
import threading

import pytest
from click.testing import CliRunner

from tsched.client import Client, RateLimited, Worker
from tsched.client.cli import cli

from tests.harness.waits import wait_until
from tests.integration.worker_support import DEADLINE_S, running

pytestmark = pytest.mark.slow

RATE, PER_S = 20, 1
LIMITED, UNLIMITED = 120, 300     # the 600 + 600, scaled to a few seconds


def _ms(text: str) -> int:
    return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _tasks(c: Client, task_type: str) -> list[dict]:
    return list(c.list(task_type=task_type, limit=10_000))


def _starts(tasks: list[dict]) -> list[int]:
    return sorted(_ms(a["started_at"]) for t in tasks for a in t["attempts"])


def _busiest_window(starts: list[int], per_ms: int) -> int:
    """The most starts any window [s, s + per_ms) holds (the sliding-window bound)."""
    best, j = 0, 0
    for i, s in enumerate(starts):
        while j < len(starts) and starts[j] < s + per_ms:
            j += 1
        best = max(best, j - i)
    return best


def _workers(cluster, handlers: dict) -> list[Worker]:
    return [Worker(cluster.urls, handlers=handlers, concurrency=8, lease_s=5)
            for _ in range(2)]


def test_concurrency_by_account_never_overlaps_three(cluster):
    with Client(cluster.urls, timeout_s=30) as c:
        c.put_limit("per-account", concurrency=2, partition_by="account_id")
        made = c.submit_many([{"task_type": "acct", "payload": {"account_id": f"a{n % 20}"},
                               "limits": ["per-account"]} for n in range(100)])
        done = threading.Event()

        def work(payload, ctx):   # a call that takes a while, so runs could overlap
            done.wait(0.15)
        workers = _workers(cluster, {"acct": work})
        with running(workers[0]), running(workers[1]):
            wait_until(lambda: all(t["state"] == "completed" for t in _tasks(c, "acct")),
                       DEADLINE_S, "every account task completed")
        tasks = _tasks(c, "acct")
    assert len(tasks) == len(made)
    widest = 0
    for account in {t["payload"]["account_id"] for t in tasks}:
        events = sorted((_ms(a[k]), d) for t in tasks if t["payload"]["account_id"] == account
                        for a in t["attempts"] for k, d in (("started_at", 1), ("ended_at", -1)))
        running_now = 0
        for _, delta in events:   # at one instant an end (-1) sorts before a start (+1)
            running_now += delta
            assert running_now <= 2, f"account {account} ran 3 at once"
            widest = max(widest, running_now)
    assert widest == 2   # the limit was reached, so the check above could have failed


def test_rate_limited_pauses_every_worker_and_counts_no_attempt(cluster):
    raised = threading.Event()

    def call(payload, ctx):
        if not raised.is_set():
            raised.set()
            raise RateLimited("partner-429", after_s=2)
    with Client(cluster.urls, timeout_s=30) as c:
        c.put_limit("partner-429", rate=1000, per_s=1)
        c.submit_many([{"task_type": "rl", "limits": ["partner-429"]} for _ in range(6)])
        workers = _workers(cluster, {"rl": call})
        with running(workers[0]), running(workers[1]):
            wait_until(lambda: all(t["state"] == "completed" for t in _tasks(c, "rl")),
                       DEADLINE_S, "every rl task completed")
        tasks = _tasks(c, "rl")
    [paused] = [t for t in tasks if any(a["outcome"] == "rate_limited" for a in t["attempts"])]
    assert paused["attempt"] == 1   # the rate-limited run is not counted
    assert [a["outcome"] for a in paused["attempts"]] == ["rate_limited", "completed"]
    pause_end = _ms(paused["attempts"][0]["ended_at"]) + 2_000
    later = [s for s in _starts(tasks) if s > _ms(paused["attempts"][0]["ended_at"])]
    assert later and min(later) >= pause_end   # no worker claimed it during the pause


def test_cli_lists_the_limits_in_use(cluster):
    result = CliRunner().invoke(cli, ["--url", ",".join(cluster.urls), "--json", "limits",
                                      "list"])
    assert result.exit_code == 0, result.output
    names = [x["name"] for x in json.loads(result.output)]
    assert "per-account" in names and "partner-429" in names


def test_rate_window_holds_through_a_leader_kill_and_unlimited_tasks_go_first(cluster):
    with Client(cluster.urls, timeout_s=30) as c:
        c.put_limit("partner", rate=RATE, per_s=PER_S)
        c.submit_many([{"task_type": "limited", "limits": ["partner"]}
                       for _ in range(LIMITED)] +
                      [{"task_type": "free"} for _ in range(UNLIMITED)])
        workers = _workers(cluster, {"limited": lambda p, ctx: None,
                                     "free": lambda p, ctx: None})

        def completed(task_type: str) -> int:
            return sum(t["state"] == "completed" for t in _tasks(c, task_type))
        with running(workers[0]), running(workers[1]):
            wait_until(lambda: completed("limited") >= LIMITED // 3, DEADLINE_S,
                       "a third of the limited tasks completed")
            victim = cluster.wait_leader()
            cluster.kill(victim)
            wait_until(lambda: completed("limited") == LIMITED, DEADLINE_S,
                       "every limited task completed after the leader died")
            limited, free = _tasks(c, "limited"), _tasks(c, "free")
    cluster.start_node(victim)
    cluster.wait_leader()
    assert _busiest_window(_starts(limited), PER_S * 1000) <= RATE
    first = min(_starts(limited))
    # LIMITED tasks at RATE per PER_S cannot all start before (LIMITED/RATE - 1) windows
    assert max(_starts(limited)) >= first + (LIMITED // RATE - 1) * PER_S * 1000
    assert all(t["state"] == "completed" for t in free)
    assert max(_ms(t["completed_at"]) for t in free) < max(_starts(limited))
