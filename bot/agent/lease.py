"""A turn's hold on its thread: one turn at a time per thread, on whichever instance, taken together with what
the turn starts from (one round trip) and let go by the turn's last write when nothing else must happen first.

A crashed worker's lease lapses after its TTL; a live one renews it every third of that.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from bot.agent.engine_errors import ThreadBusy
from bot.agent.events import EventBus
from core.messages import Message
from state.records import RunRecord
from state.store import Start, Store
from state.store_errors import StoreError

log = logging.getLogger(__name__)


@dataclass
class Lease:
    thread_id: str
    owner: str
    run: RunRecord | None
    """The run the turn opened with (the thread's latest, or the one asked for)."""
    transcript: list[Message]
    release_in_commit: bool
    """Whether the turn's last write may let go of the lease. Not when front ends are recording this turn's
    events: they must be recorded before another instance takes the thread and acts on them."""
    released: bool = False
    started: bool = False
    """The turn's opening made its new run (see :class:`state.store.Start`): ``run`` is that run."""

    def release_by(self, final: bool) -> str | None:
        """The owner to name in a write that lets go of the lease (None: this write keeps it)."""
        return self.owner if final and self.release_in_commit and not self.released else None


_owners = itertools.count()


@contextlib.asynccontextmanager
async def hold(store: Store, bus: EventBus, instance: str, thread_id: str, *, run_id: str | None = None,
               start: Start | None = None, ttl_ms: int, wait_s: float, handover_s: float) -> AsyncIterator[Lease]:
    owner = f"{instance}:{next(_owners)}"
    deadline = time.monotonic() + wait_s
    while (opened := await store.open_turn(thread_id, owner, ttl_ms, run_id=run_id, start=start)) is None:
        if time.monotonic() >= deadline:
            raise ThreadBusy("this thread is busy with another turn; try again in a moment")
        await asyncio.sleep(0.05)
    lease = Lease(thread_id, owner, opened.run, opened.transcript, release_in_commit=not bus.has_subscribers,
                  started=opened.started)
    renewer = asyncio.create_task(_renew(store, lease, ttl_ms))
    try:
        yield lease
        if not lease.released:
            # Front ends record a turn's events (cards, progress) before another instance may take the
            # thread and act on them; they only write to the store, so this is short, and bounded.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(bus.drain(thread_id=thread_id), handover_s)
    finally:
        renewer.cancel()
        if not lease.released:
            with contextlib.suppress(StoreError):
                await asyncio.shield(store.locks.release_lease(thread_id, owner))


async def _renew(store: Store, lease: Lease, ttl_ms: int) -> None:
    while True:
        await asyncio.sleep(ttl_ms / 3000)
        if lease.released:
            return
        try:
            if not await store.locks.renew_lease(lease.thread_id, lease.owner, ttl_ms) and not lease.released:
                log.error("lost the lease on thread %s", lease.thread_id)
                return
        except StoreError as exc:  # the run's own writes will fail loudly; keep trying meanwhile
            log.warning("could not renew the lease on thread %s: %s", lease.thread_id, exc)
