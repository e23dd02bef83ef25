"""`GET /v1/tasks/{id}` of a pending task says when no worker has asked for its type within
the window (`unclaimed_type`, advisory: from the claims the leader saw), null when one has,
and nothing while the leader cannot tell yet; `tsctl submit` and `tsctl get` print the hint."""
from __future__ import annotations

import asyncio

from click.testing import CliRunner

from tsched.client.cli import cli
from tsched.node.scheduling.claimed_types import ClaimedTypes

from tests.api_support import Api

WINDOW_S = 0.5


async def _get(api: Api, task_id: str) -> dict:
    status, body = await api.call("GET", f"/v1/tasks/{task_id}")
    assert status == 200, body
    return body


async def test_a_pending_task_of_a_type_no_worker_asked_for_carries_a_hint(api: Api, tt):
    api.node.claimed_types = ClaimedTypes(window_s=WINDOW_S)
    served, unserved = f"{tt}-served", f"{tt}-unserved"
    a = await api.submit(task_type=served, delay_s=3600)     # not due: claims take nothing
    b = await api.submit(task_type=unserved)
    assert await api.claim([served], wait_s=0) == []
    assert "unclaimed_type" not in await _get(api, b["task_id"])   # watched < a window
    hint = await _hint_once_the_window_passed(api, b["task_id"])
    assert hint["task_type"] == unserved and hint["window_s"] == WINDOW_S
    assert hint["message"].startswith(
        f"no worker has asked for task type {unserved!r} in the last 0.5 s")
    assert await api.claim([served], wait_s=0) == []
    assert (await _get(api, a["task_id"]))["unclaimed_type"] is None   # asked just now
    status, _ = await api.call("POST", f"/v1/tasks/{b['task_id']}/cancel")
    assert status == 200
    assert "unclaimed_type" not in await _get(api, b["task_id"])   # not pending: no hint


async def _hint_once_the_window_passed(api: Api, task_id: str, timeout_s: float = 10.0):
    """The task's `unclaimed_type` once the leader has watched a whole window (polled)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while "unclaimed_type" not in (shown := await _get(api, task_id)):
        assert asyncio.get_running_loop().time() < deadline, "no hint after the window"
        await asyncio.sleep(0.02)
    return shown["unclaimed_type"]


def _tsctl(url: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--url", url, *args])
    assert result.exit_code == 0, result.output
    return result.output


async def test_tsctl_submit_and_get_print_the_hint(api: Api, tt):
    api.node.claimed_types = ClaimedTypes(window_s=0)   # has watched a whole window at once
    url = str(api.client.make_url("")).rstrip("/")
    out = await asyncio.to_thread(_tsctl, url, "submit", tt)   # tsctl is synchronous
    task_id = out.split()[0]
    hint = f"no worker has asked for task type {tt!r} in the last 0 s"
    assert f"hint: {hint}" in out
    shown = await asyncio.to_thread(_tsctl, url, "get", task_id)
    assert f"hint: {hint}" in shown
    served = f"{tt}-served"
    api.node.claimed_types = ClaimedTypes(window_s=3600)
    api.node.claimed_types.watch(api.node.replica.term, -3600.0)   # watched for an hour
    api.node.claimed_types.note((served,), api.node.replica.term, 10.0 ** 12)
    out = await asyncio.to_thread(_tsctl, url, "submit", served)
    assert "hint:" not in out
