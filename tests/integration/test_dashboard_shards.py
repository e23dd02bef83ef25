"""The dashboard of a 3-node cluster with 3 shards, in real headless Chromium: every shard
with its leader and its tasks, and tasks of tenants on every shard in the task list."""
from __future__ import annotations

import json

import pytest

from tsched.node.topology import shard_of_tenant

from tests.harness.cluster import Cluster
from .test_dashboard import browser_page, needs_chromium, until

pytestmark = pytest.mark.slow
SHARDS = 3
TENANTS = [f"team-{i}" for i in range(9)]


@needs_chromium
async def test_dashboard_shows_every_shard_and_its_tasks(tmp_path):
    (tmp_path / "cluster").mkdir()
    with Cluster(tmp_path / "cluster", shards=SHARDS) as c:
        c.start()
        c.wait_shard_leaders()
        status, made = c.call("n1", "POST", "/v1/tasks",
                              {"tasks": [{"task_type": "t", "tenant": t} for t in TENANTS]})
        assert status == 201, made
        per_shard = {s: sum(shard_of_tenant(t, SHARDS) == s for t in TENANTS)
                     for s in range(SHARDS)}
        async with browser_page(tmp_path) as page:
            await page.navigate(c.url("n2") + "/")

            async def shards_shown():
                return await page.eval(
                    "JSON.stringify([...document.querySelectorAll('#shards tbody tr')]"
                    ".map(r => [...r.cells].map(td => td.textContent)))")
            want = {str(s): str(n) for s, n in per_shard.items()}

            async def counted():
                rows = json.loads(await shards_shown() or "[]")
                got = {r[0]: r[5] for r in rows if len(r) == 8}
                return got == want and all(r[1] != "none" for r in rows) and rows
            rows = await until("every shard with its pending tasks", counted, 30)
            assert [r[3] for r in rows] == ["n1 n2 n3", "n2 n3 n1", "n3 n1 n2"]

            async def listed():
                return await page.eval(
                    "document.querySelectorAll('#task-list tbody tr.clickable').length")
            assert await until("the task list", listed) == len(TENANTS)

            async def graphed():   # the graphs sum every shard's points
                return await page.eval(
                    "(() => { const p = window.TschedCharts && TschedCharts.plots['chart-activity'];"
                    " return p ? p.data[1].reduce((s, v) => s + (v || 0), 0) : 0; })()"
                ) == len(TENANTS)
            await until("every shard's submits in the graph", graphed, 20)
            assert page.errors == []
