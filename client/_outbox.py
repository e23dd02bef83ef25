"""Batched completions for the worker: every finished handler's outcome rides on the
worker's next claim (`take`, then `answered` or `give_back`), or, when no claim takes it
within `linger_s`, joins the next `POST /v1/completions`; while one batch is in flight the
next one fills up."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ._core import FINAL_CODES, new_key
from ._jobs import error_code_of
from .client import AsyncClient
from .errors import ApiError, Unavailable

log = logging.getLogger("tsched.worker")

BATCH_ITEMS_MAX = 100        # completions per request
ATTEMPT_S_MIN = 1.0          # the shortest deadline of one try of a batch
# How long finished outcomes wait for a claim to carry them before going on their own: a
# worker with a full pipe claims every few milliseconds; an idle one has its claims long
# polling and sends them at once after this.
LINGER_S = 0.005

Pending = tuple  # (completion item, function called once with its error code and answer)
# The cluster's answer to one completion: its error code (None: applied) and, when applied,
# the task as the minimal answer shows it: its `state` after it (a failure: `pending` for a
# retry, `dead_letter`, `cancelled`) and, for a retry, `next_retry_at`.
Answer = tuple[str | None, dict | None]


class Outbox:
    def __init__(self, client: AsyncClient, give_up_s: float, linger_s: float = 0.0) -> None:
        self._client = client
        self.linger_s = linger_s      # the worker sets it: 0 while its claims carry nothing
        self._give_up_s = give_up_s   # an unanswered batch is repeated this long (one lease)
        # one try is short, so a node that hangs (a leader lost mid-commit) does not hold
        # up every later completion behind it
        self._attempt_s = max(ATTEMPT_S_MIN, give_up_s / 3)
        self._queue: list[Pending] = []
        self._apart: list[Pending] = []   # never carried by a claim again
        self._ready = asyncio.Event()

    def post(self, item: dict, on_code: Callable[[str | None, dict | None], None]) -> None:
        """Queue one completion item; `on_code(error code, task)` once it is sent (code
        None: accepted, and `task` the answer's task after it, when the answer has one),
        called exactly once, on the loop."""
        self._queue.append((item, on_code))
        self._ready.set()

    async def send(self, item: dict) -> str | None:
        """`post`, awaiting the error code."""
        fut = asyncio.get_running_loop().create_future()
        self.post(item, lambda code, _task: None if fut.done() else fut.set_result(code))
        return await fut

    def take(self, limit: int) -> list[Pending]:
        """Up to `limit` queued completions, for a claim to carry."""
        taken = self._queue[:limit]
        del self._queue[:limit]
        return taken

    @staticmethod
    def answered(taken: list[Pending], answers: list) -> None:
        for (_, on_code), answer in zip(taken, answers):
            on_code(*answer_of(answer))

    def give_back(self, taken: list[Pending]) -> None:
        """Completions a claim took but got no answer for (or that made it refused): sent
        again on their own, one by one if a batch is refused (a completion is fenced by
        its token: a repeat is harmless)."""
        if taken:
            self._apart += taken
            self._ready.set()

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            if self.linger_s and self._queue and not self._apart:
                await asyncio.sleep(self.linger_s)   # a claim may carry them meanwhile
            while self._apart or self._queue:
                source = self._apart or self._queue
                batch = source[:BATCH_ITEMS_MAX]
                del source[:BATCH_ITEMS_MAX]
                outcomes = await self._send_batch([item for item, _ in batch])
                for (_, on_code), outcome in zip(batch, outcomes):
                    on_code(*outcome)

    async def _send_batch(self, items: list[dict]) -> list[Answer]:
        """(error code, task) per item. Repeats an unanswered batch with the same
        idempotency key until the leases it reports on have surely expired."""
        key = new_key()
        give_up_at = time.monotonic() + self._give_up_s
        while True:
            try:
                answers = await self._client.completions(items, key=key, minimal=True,
                                                         deadline_s=self._attempt_s)
                outcomes = [answer_of(a) for a in answers]
                return outcomes + [("no_answer", None)] * (len(items) - len(outcomes))
            except Unavailable as exc:   # raised only after the client's own deadline
                if time.monotonic() > give_up_at:
                    log.error("completions lost after the lease: %s", exc)
                    return [("unavailable", None)] * len(items)
            except ApiError as exc:
                if len(items) == 1 or exc.code in FINAL_CODES:   # final: never re-sent
                    return [(exc.code, None)] * len(items)
                # one bad item (too large...) refuses the batch: send them one by one
                return [out for one in items for out in await self._send_batch([one])]


def answer_of(answer: object) -> Answer:
    """(error code, task) of one entry of a completions answer."""
    code = error_code_of(answer)
    return code, answer if code is None and isinstance(answer, dict) else None
