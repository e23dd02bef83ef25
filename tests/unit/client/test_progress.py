"""A handler's progress on the client side (DESIGN 9): `ctx.progress` checks and cuts its
input; tsctl shows it as a bar (`get`) and follows it (`get --wait`, `wait`)."""
from __future__ import annotations

import math

import pytest

from tsched.client import cli_tasks, render
from tsched.client._jobs import PROGRESS_MESSAGE_CHARS_MAX, Job


def _job(told: list) -> Job:
    return Job({"task_id": "t", "fencing_token": 3}, 30, progress_due=lambda: told.append(1))


def test_ctx_progress_keeps_the_latest_and_tells_the_worker() -> None:
    told: list = []
    job = _job(told)
    job.ctx.progress(0.1, "starting")
    job.ctx.progress(1, "x" * 1_000)
    assert job.progress == (1.0, "x" * PROGRESS_MESSAGE_CHARS_MAX) and told == [1, 1]


@pytest.mark.parametrize("fraction", [-0.01, 1.01, math.nan, True, "0.5", None])
def test_ctx_progress_refuses_what_is_not_a_fraction(fraction) -> None:
    job = _job([])
    with pytest.raises(ValueError, match="fraction"):
        job.ctx.progress(fraction)
    assert job.progress is None


def test_tsctl_shows_progress_as_a_bar_and_a_line() -> None:
    p = {"fraction": 0.5, "message": "half", "at": "2026-12-06T15:00:00.000Z"}
    assert render.progress(p) == ("[##########          ]  50%  half "
                                  "(at 2026-12-06T15:00:00.000Z)")
    detail = render.task_detail({"task_id": "t", "state": "running", "progress": p})
    assert "progress  [##########" in detail
    running = {"state": "running", "progress": p}
    assert cli_tasks._steps_done(running) == 500
    assert cli_tasks._steps_done({"state": "completed", "progress": None}) == 1_000
    assert cli_tasks._steps_done({"state": "pending", "progress": None}) == 0
    assert cli_tasks._waiting_line(running) == "running: half"
    assert cli_tasks._waiting_line({"state": "pending"}) == "pending"
