"""A real 3-node cluster under a plain batched load (submits of 200, claims of 100, batched
completions, every node used) replicates without waste: no entry sent twice, no log
truncated, and no ERROR or CRITICAL line (pysyncobj's "may have diverged") in any log."""
from __future__ import annotations

import re
import threading

import httpx
import pytest

from tests.harness.cluster import Cluster

pytestmark = pytest.mark.slow

BATCHES = 20          # per producer
BATCH = 200
PRODUCERS = 3
WORKERS = 3
TASK_TYPE = "repl"
WASTE = ("resent_entries", "truncations", "truncated_entries")


def produce(url: str, errors: list) -> None:
    with httpx.Client(timeout=30) as http:
        for _ in range(BATCHES):
            r = http.post(url + "/v1/tasks", json={
                "tasks": [{"task_type": TASK_TYPE, "payload": {"n": i}} for i in range(BATCH)]})
            if r.status_code != 201 and r.status_code != 200:
                errors.append(r.text)


def work(url: str, worker_id: str, done: list, stop: threading.Event, errors: list) -> None:
    with httpx.Client(timeout=30) as http:
        while not stop.is_set():
            r = http.post(url + "/v1/claims", json={"worker_id": worker_id, "task_types": [TASK_TYPE],
                                                    "max_tasks": 100, "wait_s": 0.5})
            tasks = r.json().get("tasks", []) if r.status_code == 200 else []
            if r.status_code != 200:
                errors.append(r.text)
            if not tasks:
                continue
            items = [{"task_id": t["task_id"], "fencing_token": t["fencing_token"], "result": {}}
                     for t in tasks]
            r = http.post(url + "/v1/completions", json={"completions": items})
            done.extend(x for x in r.json().get("results", []) if "error" not in x)


def metric(text: str, name: str) -> float:
    m = re.search(rf"^tsched_raft_{name}_total (\S+)$", text, re.M)
    assert m, f"tsched_raft_{name}_total missing from /metrics"
    return float(m.group(1))


def test_a_batched_load_resends_and_truncates_nothing_and_logs_no_alarm(tmp_path):
    with Cluster(tmp_path, size=3, fast_raft=False) as c:
        c.start()
        c.wait_leader()
        errors: list = []
        done: list = []
        stop = threading.Event()
        workers = [threading.Thread(target=work, args=(c.url(i), f"w-{i}", done, stop, errors))
                   for i in c.ids[:WORKERS]]
        producers = [threading.Thread(target=produce, args=(c.url(c.ids[p % 3]), errors))
                     for p in range(PRODUCERS)]
        for t in workers + producers:
            t.start()
        for t in producers:
            t.join()
        total = BATCHES * BATCH * PRODUCERS
        try:
            while len(done) < total and all(t.is_alive() for t in workers) and not errors:
                workers[0].join(0.2)
        finally:
            stop.set()
            for t in workers:
                t.join()
        assert not errors, errors[:3]
        assert len(done) == total
        for i in c.ids:
            status, text = c.call(i, "GET", "/metrics")
            assert status == 200
            for name in WASTE:
                assert metric(text, name) == 0, (i, name, c.log(i))
            log = c.log_path(i).read_text()
            alarms = [line for line in log.splitlines() if " ERROR " in line or " CRITICAL " in line]
            assert not alarms, (i, alarms[:5])
