"""The dashboard's audit tab (DESIGN 14.6) in real headless Chromium against a real 3-node
cluster: a replay clicked on the page, a cancel and a schedule put over HTTP, all listed
with their actors; the action filter narrows the list. Skipped without a chromium binary."""
from __future__ import annotations

import asyncio

from .test_dashboard import (browser_page, dead_letter, leader_cluster, needs_chromium,
                             screenshot_dir, until)

import pytest

pytestmark = pytest.mark.slow


def _rows(page):
    return page.eval("[...document.querySelectorAll('#audit tbody tr[data-audit-id]')]"
                     ".map(r => [...r.cells].slice(1, 4).map(c => c.textContent))")


@needs_chromium
async def test_the_audit_tab_lists_operator_actions_and_filters_them(tmp_path):
    shots = screenshot_dir(tmp_path)
    with leader_cluster(tmp_path) as (c, leader):
        dead_id = dead_letter(c, leader, "acme", "boom")
        s, t = c.call(leader, "POST", "/v1/tasks", {"task_type": "x", "tenant": "globex"})
        assert s == 201, t
        s, b = c.call(leader, "POST", f"/v1/tasks/{t['task_id']}/cancel")
        assert s == 200, b
        s, b = c.call(leader, "PUT", "/v1/schedules/nightly",
                      {"tenant": "acme", "cron": "0 3 * * *", "task": {"task_type": "x"}})
        assert s == 200, b
        node = c.followers(leader)[0]
        async with browser_page(tmp_path) as page:
            await page.navigate(c.url(node) + "/")
            await until("the first refresh", lambda: page.eval(
                "Number(document.body && document.body.dataset.refreshes || 0)"))
            await page.click("[data-tab=dlq]")
            button = f"#dlq tbody tr[data-task-id='{dead_id}'] [data-action=replay]"
            await until("the dead letter's row",
                        lambda: page.eval(f"!!document.querySelector(\"{button}\")"))
            await page.click(button)

            async def replayed():
                s, b = await asyncio.to_thread(c.call, node, "GET", f"/v1/tasks/{dead_id}")
                return s == 200 and b["state"] == "pending"
            await until("the replay", replayed)

            await page.click("[data-tab=audit]")

            async def three():
                rows = await _rows(page)
                return len(rows) == 3 and rows
            rows = await until("three audit rows", three)
            assert rows == [["anonymous", "task.replay", dead_id],
                            ["anonymous", "schedule.put", "acme/nightly"],
                            ["anonymous", "task.cancel", t["task_id"]]]
            change = await page.eval("document.querySelector("
                                     "'#audit tr[data-action=\"task.cancel\"] td.change')"
                                     ".textContent")
            assert "pending" in change and "cancelled" in change
            await page.screenshot(shots / "dashboard-audit.png")

            await page.click("#a-action")
            await page.send("Input.insertText", {"text": "schedule.put"})
            await page.click("#audit-search button[type=submit]")

            async def filtered():
                rows = await _rows(page)
                return len(rows) == 1 and rows
            assert await until("the filtered list", filtered) == [
                ["anonymous", "schedule.put", "acme/nightly"]]
            assert page.errors == [], page.errors
