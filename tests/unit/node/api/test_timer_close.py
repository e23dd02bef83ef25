"""The leader timer stops when its app closes, even when the state changed in the same loop
iteration as the close (node/scheduling/timer.py): a lost cancel had made the app's cleanup wait
forever, one test run in a few."""
from __future__ import annotations

import asyncio

from tests.api_support import Api, until


async def test_the_timer_stops_when_the_state_changes_as_it_is_closed(api: Api, tt):
    timer = api.node.timer
    await api.submit(task_type=tt)
    await api.claim([tt], lease_s=60)       # its lease's end: the timer waits with a timeout
    await until(lambda: bool(timer._changed._waiters), "the timer waiting for a change")
    timer.state_changed()                   # its wait ends in the iteration that cancels it
    await asyncio.wait_for(timer.close(), 10)
    assert timer._task.done()
