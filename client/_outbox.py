"""Batched completions for the worker: every finished handler's outcome joins the next
`POST /v1/completions`; while one batch is in flight the next one fills up."""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from ._jobs import error_code_of
from .client import AsyncClient
from .errors import ApiError, Unavailable

log = logging.getLogger("tsched.worker")

BATCH_ITEMS_MAX = 100        # completions per request
ATTEMPT_S_MIN = 1.0          # the shortest deadline of one try of a batch


class Outbox:
    def __init__(self, client: AsyncClient, give_up_s: float) -> None:
        self._client = client
        self._give_up_s = give_up_s   # an unanswered batch is repeated this long (one lease)
        # one try is short, so a node that hangs (a leader lost mid-commit) does not hold
        # up every later completion behind it
        self._attempt_s = max(ATTEMPT_S_MIN, give_up_s / 3)
        self._queue: list[tuple[dict, asyncio.Future]] = []
        self._ready = asyncio.Event()

    async def send(self, item: dict) -> str | None:
        """Queue one completion item; its error code once sent (None: accepted)."""
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((item, fut))
        self._ready.set()
        return await fut

    async def run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._queue:
                batch = self._queue[:BATCH_ITEMS_MAX]
                del self._queue[:BATCH_ITEMS_MAX]
                codes = await self._send_batch([item for item, _ in batch])
                for (_, fut), code in zip(batch, codes):
                    if not fut.done():
                        fut.set_result(code)

    async def _send_batch(self, items: list[dict]) -> list[str | None]:
        """Error code per item. Repeats an unanswered batch with the same idempotency key
        until the leases it reports on have surely expired."""
        key = uuid.uuid4().hex
        give_up_at = time.monotonic() + self._give_up_s
        while True:
            try:
                answers = await self._client.completions(items, key=key,
                                                         deadline_s=self._attempt_s)
                codes = [error_code_of(a) for a in answers]
                return codes + ["no_answer"] * (len(items) - len(codes))
            except Unavailable as exc:   # raised only after the client's own deadline
                if time.monotonic() > give_up_at:
                    log.error("completions lost after the lease: %s", exc)
                    return ["unavailable"] * len(items)
            except ApiError as exc:
                if len(items) == 1:
                    return [exc.code]
                # one bad item (too large...) refuses the batch: send them one by one
                return [code for one in items for code in await self._send_batch([one])]
