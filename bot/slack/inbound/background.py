"""Work a Slack request starts after its acknowledgement: kept so shutdown and tests can wait for it, and so
one request's failure is logged, never raised into Bolt."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from contextvars import ContextVar
from typing import Any

from state import StoreError

log = logging.getLogger(__name__)

FAILED: ContextVar[list[str] | None] = ContextVar("failed", default=None)
"""Set by whoever reads a stored request (a list): the work that failed while Bolt read it. Bolt logs a listener's
exception and answers; the reader then knows the request was not done, and it is read again (then set aside in
the dead letters) rather than acknowledged as done with its work lost."""


class Background:
    def __init__(self) -> None:
        self.running: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work`` after the acknowledgement; its failure is logged, never raised into Bolt."""
        async def guarded() -> None:
            try:
                await work
            except Exception:
                log.exception("background work %s failed", name)

        task = asyncio.create_task(guarded(), name=name)
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def now(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work`` before answering (a stored request read by a worker); a failure is logged, as in
        :meth:`spawn`, and told to the reader (:data:`FAILED`); an outage leaves the request to be read again."""
        try:
            await work
        except StoreError:
            raise
        except Exception as exc:
            log.exception("work %s failed", name)
            failed = FAILED.get()
            if failed is not None:
                failed.append(f"{name}: {type(exc).__name__}: {exc}"[:300])

    def busy(self) -> bool:
        return bool(self.running)

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for background work (tests, graceful shutdown)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.running and loop.time() < deadline:
            await asyncio.wait(set(self.running), timeout=max(deadline - loop.time(), 0.01))
