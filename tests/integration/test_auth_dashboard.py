"""The dashboard on a cluster with [auth], in real headless Chromium: without a token it says
one is needed; with the admin token typed into its token field it shows the cluster; the
token is kept in the tab's sessionStorage only."""
from __future__ import annotations

import hashlib
import json

import pytest

from tests.harness.cluster import Cluster
from .test_dashboard import Page, browser_page, needs_chromium, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ADMIN = "dashboard-admin-token-0123456789"
AUTH_TOML = f'\n[auth]\nadmin_token_sha256 = ["{hashlib.sha256(ADMIN.encode()).hexdigest()}"]\n'


@needs_chromium
async def test_the_dashboard_asks_for_a_token_and_works_with_one(tmp_path):
    (tmp_path / "cluster").mkdir()
    with Cluster(tmp_path / "cluster", extra_toml=AUTH_TOML, status_token=ADMIN) as c:
        c.start()
        leader = c.wait_leader()
        s, task = c.call(leader, "POST", "/v1/tasks", {"task_type": "dash-auth"},
                         headers={"Authorization": f"Bearer {ADMIN}"})
        assert s == 201, task
        async with browser_page(tmp_path) as page:
            await _drive(page, c.url(leader), task["task_id"])


async def _drive(page: Page, url: str, task_id: str) -> None:
    await page.navigate(url + "/")

    async def banner_text():
        return await page.eval("(() => { const b = document.getElementById('banner');"
                               " return b && !b.hidden ? b.textContent : ''; })()")
    text = await until("the unauthenticated banner", banner_text)
    assert "unauthenticated" in text and "set an API token" in text, text
    assert await page.eval("Number(document.body.dataset.refreshes || 0)") == 0

    await page.click("#token-button")
    await page.eval(f"document.getElementById('token-input').value = {json.dumps(ADMIN)}")
    await page.click("#token-form button[type=submit]")

    async def refreshed():
        return await page.eval("Number(document.body.dataset.refreshes || 0)") >= 1
    await until("a refresh with the token", refreshed)
    assert await banner_text() == ""
    body = await page.eval("document.body.innerText")
    assert task_id in body or "dash-auth" in body, body[:2000]
    assert await page.eval("sessionStorage.getItem('tsched.token')") == ADMIN
    assert await page.eval("localStorage.length") == 0
    assert await page.eval("document.cookie") == ""
    assert not page.errors or all("401" in e for e in page.errors), page.errors
