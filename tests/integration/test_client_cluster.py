"""The Client against real clusters: read-your-writes through followers, idempotent
submits, and a leader killed in the middle of a stream of submits."""
from __future__ import annotations

import threading

import pytest

from tsched.client import ApiError, Client

pytestmark = pytest.mark.slow
STREAM = 150


def all_tasks(client: Client, task_type: str) -> list[dict]:
    return list(client.list(task_type=task_type))


def test_reads_see_own_writes_on_any_node(cluster):
    leader = cluster.wait_leader()
    follower = cluster.followers(leader)[0]
    with Client(cluster.url(leader)) as writer:
        task = writer.submit("ryw", {"x": 1})
        seq = writer.applied_seq
    # another client pointed at a follower, told the writer's applied_seq
    with Client(cluster.url(follower)) as reader:
        reader._seq.note({"applied_seq": seq})
        assert reader.get(task["task_id"])["payload"] == {"x": 1}
        assert reader.applied_seq >= seq


def test_body_idempotency_key_returns_the_first_task(cluster):
    with Client(cluster.urls) as c:
        first = c.submit("idem", {"n": 1}, idempotency_key="order-17")
        again = c.submit("idem", {"n": 2}, idempotency_key="order-17")
        assert again["task_id"] == first["task_id"] and again["duplicate"] is True
        assert first["duplicate"] is False
        with pytest.raises(ApiError) as info:
            c.submit("idem", {"n": 1}, bogus_field=1)
        assert info.value.code == "invalid_argument" and info.value.status == 400


def test_leader_killed_mid_stream_loses_and_duplicates_nothing(fresh_cluster):
    c = fresh_cluster
    leader = c.wait_leader()
    acked: list[str] = []
    seen: list[int] = []       # the producer's applied_seq: its writes went through any node
    halfway = threading.Event()

    def produce():
        with Client(c.urls, timeout_s=30) as client:
            for i in range(STREAM):
                acked.append(client.submit("stream", {"i": i})["task_id"])
                if i == STREAM // 3:
                    halfway.set()
            seen.append(client.applied_seq)

    producer = threading.Thread(target=produce)
    producer.start()
    assert halfway.wait(60)
    c.kill(leader)
    at_kill = len(acked)
    producer.join(120)
    assert at_kill < STREAM, "the stream ended before the leader died: nothing was tested"
    assert not producer.is_alive()
    assert len(acked) == STREAM and len(set(acked)) == STREAM   # every submit answered
    new_leader = c.wait_leader(exclude=[leader])
    with Client(c.url(new_leader)) as reader:
        # a submit a follower acknowledged may not be applied at the leader yet
        reader._seq.note({"applied_seq": seen[0]})
        tasks = all_tasks(reader, "stream")
    payloads = sorted(t["payload"]["i"] for t in tasks)
    assert payloads == list(range(STREAM)), "a submit was lost or applied twice"
    assert {t["task_id"] for t in tasks} == set(acked)


async def test_async_client_against_the_cluster(cluster):
    from tsched.client import AsyncClient
    async with AsyncClient(cluster.urls) as c:
        made = await c.submit_many([{"task_type": "async_twin", "payload": n} for n in range(3)])
        got = await c.get(made[0]["task_id"])
        assert got["payload"] == 0 and c.applied_seq >= 1
        listed = [t async for t in c.list(task_type="async_twin")]
        assert sorted(t["payload"] for t in listed) == [0, 1, 2]
        assert (await c.cancel(made[1]["task_id"]))["state"] == "cancelled"
        status = await c.cluster_status()
        assert status["leader"] in cluster.ids


def test_submit_batches_keeps_several_in_flight_and_answers_in_order(cluster):
    """2,050 tasks as batches of 200, 4 at once: every task once, answers in the order of
    the list; a batch the cluster refuses raises its error, and the batches in flight
    beside it were submitted."""
    tasks = [{"task_type": "batches", "payload": n} for n in range(2050)]
    with Client(cluster.urls) as c:
        made = c.submit_batches(tasks, batch=200, in_flight=4, minimal=True)
        assert len(made) == 2050 and len({t["task_id"] for t in made}) == 2050
        assert [c.get(made[i]["task_id"])["payload"] for i in (0, 1999, 2049)] == [0, 1999, 2049]
        assert len(all_tasks(c, "batches")) == 2050
        bad = [{"task_type": "batches-bad", "payload": n} for n in range(300)]
        bad[150]["bogus_field"] = 1               # the second batch of 100 is refused
        with pytest.raises(ApiError) as info:
            c.submit_batches(bad, batch=100, in_flight=1)
        assert info.value.code == "invalid_argument"
        assert len(all_tasks(c, "batches-bad")) == 100    # the first only; the third not sent
        with pytest.raises(ValueError):
            c.submit_batches(tasks, batch=1001)


async def test_async_submit_batches(cluster):
    from tsched.client import AsyncClient
    async with AsyncClient(cluster.urls) as c:
        made = await c.submit_batches([{"task_type": "async_batches", "payload": n}
                                       for n in range(450)], batch=100, in_flight=3)
        assert [t["payload"] for t in made] == list(range(450))
