"""`GET /v1/archive` on real clusters (DESIGN 14.3), whose cluster files have no [archive]
table (the archive is on by default, under each node's data_dir): tasks evicted by retention are found
by task id and by tenant over HTTP and through `tsctl archive search` without --dir; a
tenant token is refused; with shards the router sends
the search to the shard that archived the tasks."""
from __future__ import annotations

import hashlib
import json

import httpx
import pytest
from click.testing import CliRunner

from tests.harness.cluster import running
from tests.harness.waits import wait_until
from tsched.client import Client
from tsched.client.cli import cli
from tsched.node.topology import shard_of_tenant

pytestmark = pytest.mark.slow
ADMIN, BANK = "archive-admin-token", "bank-tenant-token"
RETENTION_MS = 2_000


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


TOML = f"""
[limits]
retention_ms = {RETENTION_MS}

[auth]
admin_token_sha256 = ["{sha(ADMIN)}"]
[auth.tenant_token_sha256]
bank = ["{sha(BANK)}"]
"""


@pytest.fixture
def archiving(tmp_path):
    yield from running(tmp_path, extra_toml=TOML, status_token=ADMIN)


def search(url: str, token: str = ADMIN, **params) -> httpx.Response:
    return httpx.get(f"{url}/v1/archive", params=params, timeout=30,
                     headers={"Authorization": f"Bearer {token}"})


def finish(client: Client, tenant: str, n: int) -> list[str]:
    """n tasks of `tenant` completed (the last one dead-lettered); their ids."""
    ids = [client.submit("statement", {"i": i}, tenant=tenant, max_retries=0)["task_id"]
           for i in range(n)]
    done = 0
    while done < n:
        for task in client.claim("w1", ["statement"], max_tasks=n, wait_s=5):
            if task["task_id"] == ids[-1]:
                client.fail(task["task_id"], task["fencing_token"], "ledger closed",
                            retryable=False)
            else:
                client.complete(task["task_id"], task["fencing_token"], {"ok": True})
            done += 1
    return ids


def test_archive_is_searched_over_http_and_by_tsctl(archiving, monkeypatch):
    cluster = archiving
    url = cluster.url(cluster.ids[0])
    with Client(cluster.urls, token=ADMIN, timeout_s=30) as client:
        bank = finish(client, "bank", 5)
        other = finish(client, "other", 2)

    def archived(tenant: str) -> list[str]:
        resp = search(url, tenant=tenant)
        assert resp.status_code == 200, resp.text
        return sorted(r["task"]["task_id"] for r in resp.json()["records"])
    wait_until(lambda: archived("bank") == sorted(bank) and archived("other") == sorted(other),
               60, "the evicted tasks in n1's archive")

    # the node keeps an index beside each day's file; a search by id goes through it
    assert list((cluster.data_dir(cluster.ids[0]) / "archive").glob("tasks-*.idx"))
    by_id = search(url, task_id=bank[-1]).json()
    (record,) = by_id["records"]
    assert by_id["node"] == cluster.ids[0] and by_id["next_cursor"] is None
    assert record["task"]["state"] == "dead_letter" and record["v"] == 1
    assert record["task"]["attempts"][0]["error"] == "ledger closed"

    seen, cursor = [], None             # two at a time, following the cursor
    while True:
        page = search(url, tenant="bank", limit=2, **({"cursor": cursor} if cursor else {}))
        assert page.status_code == 200, page.text
        assert len(page.json()["records"]) <= 2
        seen += [r["task"]["task_id"] for r in page.json()["records"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert sorted(set(seen)) == sorted(bank)
    assert search(url, tenant="bank", **{"from": "2000-01-01", "to": "2000-01-02"}
                  ).json()["records"] == []

    refused = search(url, token=BANK, tenant="bank")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    bad = search(url, tenant="bank", task_id=bank[0])
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_argument"
    unknown = search(url, tenant="bank", state="completed")
    assert unknown.status_code == 400 and "state" in unknown.json()["error"]["details"]["fields"]

    monkeypatch.setenv("TSCTL_URL", url)
    monkeypatch.setenv("TSCTL_TOKEN", ADMIN)
    runner = CliRunner()
    out = runner.invoke(cli, ["archive", "search", "--tenant", "bank", "--json"],
                        catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert sorted(json.loads(x)["task"]["task_id"] for x in out.stdout.splitlines()) \
        == sorted(bank)
    table = runner.invoke(cli, ["archive", "search", "--task-id", other[0]],
                          catch_exceptions=False)
    assert table.exit_code == 0 and other[0] in table.stdout and "completed" in table.stdout
    monkeypatch.setenv("TSCTL_TOKEN", BANK)
    scoped = runner.invoke(cli, ["archive", "search", "--tenant", "bank"])
    assert scoped.exit_code == 1 and "forbidden" in scoped.output


@pytest.fixture
def sharded(tmp_path):
    toml = f'\n[limits]\nretention_ms = {RETENTION_MS}\n'
    yield from running(tmp_path, extra_toml=toml, shards=2)


def test_with_shards_the_router_asks_the_shard_that_archived(sharded):
    cluster = sharded
    names = [f"team-{i}" for i in range(40)]
    tenants = [t for s in (0, 1) for t in [n for n in names if shard_of_tenant(n, 2) == s][:2]]
    with Client(cluster.urls, timeout_s=30) as client:
        ids = {t: finish(client, t, 1)[0] for t in tenants}
    url = cluster.url(cluster.ids[0])

    def found() -> bool:
        for tenant, tid in ids.items():
            by_tenant = httpx.get(f"{url}/v1/archive", params={"tenant": tenant}, timeout=30)
            by_id = httpx.get(f"{url}/v1/archive", params={"task_id": tid}, timeout=30)
            assert by_tenant.status_code == by_id.status_code == 200, by_tenant.text
            if [r["task"]["task_id"] for r in by_tenant.json()["records"]] != [tid]:
                return False
            if [r["task"]["task_id"] for r in by_id.json()["records"]] != [tid]:
                return False
        return True
    wait_until(found, 60, "every tenant's task archived by its shard")
    shards = {httpx.get(f"{url}/v1/archive", params={"tenant": t}, timeout=30).json()["shard"]
              for t in tenants}
    assert shards == {0, 1}
