"""The worker: reads the work queue (:mod:`state.queue`) and does each item with the :class:`Executor`.

An entry is acknowledged only once its outcome is durable — done, or its asker told in words why not. A try
that fails is tried again soon by whichever worker reads first; one that fails every time (or takes down every
worker that takes it) is set aside in the dead letters, which ``opspilot stats`` and ``/metrics`` show.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

from pydantic import ValidationError

from bot.agent.periodic import cancelled
from bot.slack.inbound.work import AGAIN, Executor
from bot.slack.inbound.work_items import Delivery, NotYet, StoredAdapter, WorkAdapter, WorkItem
from state import StoreError, StoreUnavailable
from state.queue import Entry, Lane
from state.store import WorkQueue

log = logging.getLogger(__name__)

MAX_DELIVERIES = 5
RETRY_AFTER_S = (2.0, 5.0, 15.0, 30.0)
"""After a failed try, when any worker takes the item again (then: set aside, its asker told)."""
READ_WINDOW_S = 10.0
"""A worker that has not read the queue for this long does not count as reading it (readiness)."""
BEAT_S = 2.0
QUICK_RECLAIM_S = 2.0
"""How long the quick lane's entries (a click, a form, a command, Stop: a person watches for them) may go untouched
before another worker takes them: a killed worker's click is done again within seconds, not after the work
lane's idle period. Its holder touches them every third of it."""
_TOUCH_MARGIN_S = 1.0
_NEVER_MS = 2**31 - 1  # an idle time no entry reaches (XAUTOCLAIM's min-idle-time)


class Worker:
    """Reads the work queue and does each item, touching it while busy; claims what dead workers left."""

    def __init__(self, *, queue: WorkQueue, executor: Executor, concurrency: int = 64,
                 reclaim_after_s: float = 45.0,
                 deliveries: Callable[[Delivery, str], Awaitable[None]] | None = None,
                 retry_after_s: Sequence[float] = RETRY_AFTER_S) -> None:
        self.queue = queue
        self.executor = executor
        self.deliveries = deliveries
        self.name = f"worker-{uuid.uuid4().hex[:8]}"
        self.reclaim_after_s = reclaim_after_s
        self.quick_reclaim_s = min(reclaim_after_s, QUICK_RECLAIM_S)
        self.retry_after_s = tuple(retry_after_s)
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.Task[None] | None = None
        self._beats: asyncio.Task[None] | None = None
        self._read_at = float("-inf")
        self._stopping = False
        self._back_at = time.monotonic()
        """When this worker started, or first tried Redis again after it could not reach it: see :meth:`_idle_ms`."""
        self._unheard = False

    def start(self) -> None:
        self._stopping = False
        if self._loop is None or self._loop.done():
            self._loop = asyncio.create_task(self._forever(), name=self.name)
        if self._beats is None or self._beats.done():
            self._beats = asyncio.create_task(self._beat(), name=f"{self.name}-beat")

    async def stop(self) -> None:
        self._stopping = True  # the read loop ends after its current read: never cut off mid-command
        for task in (self._beats, self._loop):
            if task is None:
                continue
            if task is not self._beats:
                await asyncio.wait({task}, timeout=5)
            await cancelled(task)  # a cancel lost on the way (as a Redis reply lands) is sent again
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)

    def busy(self) -> bool:
        return bool(self._tasks)

    def reading(self) -> bool:
        """The read loop runs and read the queue lately (or waits for a free slot: busy, not stuck)."""
        if self._loop is None or self._loop.done():
            return False
        return self._slots.locked() or time.monotonic() - self._read_at < READ_WINDOW_S

    async def _beat(self) -> None:
        """Tell fronts this worker reads the queue (what their readiness counts), while it does."""
        told = False
        while not self._stopping:
            if self.reading():
                try:
                    await self.queue.beat(self.name)
                    told = True
                except StoreError as exc:
                    log.debug("%s: could not report reading (%s)", self.name, exc)
            await asyncio.sleep(BEAT_S if told else 0.1)  # the first read is told at once

    async def _forever(self) -> None:
        while not self._stopping:
            try:
                await self.round()
            except StoreError as exc:  # an outage is told once by the outage log (core/outages.py)
                (log.debug if isinstance(exc, StoreUnavailable) else log.warning)(
                    "%s: the queue is unavailable (%s)", self.name, exc)
                await asyncio.sleep(1.0)
            except Exception:
                log.exception("%s: reading work failed", self.name)
                await asyncio.sleep(1.0)

    async def round(self, block_ms: int = 1000) -> int:
        """Take what is there (and what dead workers left) and start on it; returns how many."""
        await self._slots.acquire()
        self._slots.release()
        if self._unheard:
            self._back_at, self._unheard = time.monotonic(), False
        try:
            # What dead workers (or failed tries) left starts at once, before this round waits for new work: an
            # entry claimed but not started is touched by nobody and would be claimed again.
            reclaimed = await self.queue.reclaim(self.name, idle_ms=self._idle_ms("work"),
                                                 quick_idle_ms=self._idle_ms("quick"))
            await self._start(reclaimed)
            taken = await self.queue.take(self.name, count=8, block_ms=0 if reclaimed else block_ms)
        except StoreError:
            self._unheard = True
            raise
        self._read_at = time.monotonic()
        await self._start(taken)
        return len(reclaimed) + len(taken)

    async def _start(self, entries: list[Entry]) -> None:
        for entry in entries:
            if entry.deliveries > MAX_DELIVERIES:  # every worker that took it died with it: set it aside
                await self._bury(entry, f"handed out {entry.deliveries} times and never finished (workers died)")
                continue
            if entry.deliveries > 1:
                log.warning("%s: %s is done again (try %d)", self.name, entry.id, entry.deliveries)
            task = asyncio.create_task(self._do(entry), name=f"work-{entry.id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _do(self, entry: Entry) -> None:
        """Do one entry; acknowledged only once its outcome is durable (done, or its asker told why not)."""
        done = asyncio.Event()
        keeper = asyncio.create_task(self._keep(entry, done))  # also while it waits for a slot
        try:
            entry, failure = await self._tries(entry)
        finally:
            done.set()  # let a touch in flight finish: a command cut off mid-reply can leave its connection stuck
            await asyncio.wait({keeper}, timeout=5)
        if failure is None:
            try:
                await self.queue.ack(entry.id, lane=entry.lane)
            except StoreError as exc:  # done: only its ack waits; it is read again once Redis is back (done once)
                log.warning("work %s done, not acknowledged (Redis away): %s", entry.id, exc)
        elif failure and entry.deliveries < MAX_DELIVERIES:  # another try, soon, by whichever worker reads first
            self.executor.metrics.inc("opspilot_work_retries_total", kind=_kind(entry.body))
            with contextlib.suppress(StoreError):  # Redis away: it is reclaimed after a whole idle period instead
                await self.queue.retry_later(self.name, entry.id, after_s=self._after(entry), lane=entry.lane,
                                             idle_ms=int(self._idle_s(entry.lane) * 1000))
        elif failure:
            await self._bury(entry, failure)

    async def _tries(self, entry: Entry) -> tuple[Entry, str | None]:
        """The entry tried (see :meth:`_attempt`). A quick-lane entry that fails is tried again here, held and
        touched meanwhile: its lane's idle period is too short to carry the retry schedule."""
        while True:
            async with self._slots:
                failure = await self._attempt(entry)
            if not failure or entry.lane != "quick" or entry.deliveries >= MAX_DELIVERIES:
                return entry, failure
            self.executor.metrics.inc("opspilot_work_retries_total", kind=_kind(entry.body))
            await asyncio.sleep(self._after(entry))
            entry = dataclasses.replace(entry, deliveries=entry.deliveries + 1)

    def _after(self, entry: Entry) -> float:
        return self.retry_after_s[min(entry.deliveries, len(self.retry_after_s)) - 1]

    async def _attempt(self, entry: Entry) -> str | None:
        """None: done. "": an outage, left pending as it is (done again once Redis is back). Otherwise what failed."""
        try:
            item = StoredAdapter.validate_json(entry.body)
        except ValidationError as exc:
            return f"unreadable: {exc.error_count()} problem(s), first: {exc.errors()[0]['msg']}"
        try:
            if isinstance(item, Delivery):
                if self.deliveries is None:
                    raise RuntimeError("a stored Slack request, and nothing here reads those")
                # Its work items are enqueued before this one is acknowledged: a worker that dies in between
                # leaves it to be read again (the dedupe recognises this entry).
                await self.deliveries(item, entry.id)
            else:
                again = AGAIN.set(entry.deliveries > 1)
                try:
                    await self.executor(item)
                finally:
                    AGAIN.reset(again)
        except (StoreError, NotYet) as exc:  # an outage, not a bug: left unacknowledged, done again
            log.warning("%s: work %s (%s) waits for Redis: %s", self.name, entry.id, item.kind, exc)
            return ""
        except Exception as exc:  # a bug or a dependency failing every time: tried again, then set aside
            log.exception("%s: work %s (%s) failed (try %d of %d)", self.name, entry.id, item.kind,
                          entry.deliveries, MAX_DELIVERIES)
            return f"{type(exc).__name__}: {exc}"[:500] or "failed"
        return None

    async def _bury(self, entry: Entry, reason: str) -> None:
        """Every try failed: the item goes to the dead letters (``opspilot stats``) and its asker is told."""
        ref = uuid.uuid4().hex[:8]
        log.error("%s: work %s set aside after %d tries (ref %s): %s", self.name, entry.id, entry.deliveries, ref,
                  reason)
        try:
            item = WorkAdapter.validate_json(entry.body)
        except ValidationError:
            item = None  # a stored Slack request or unreadable: the operator's list is all there is
        if item is not None:
            await self.executor.give_up(item, ref)  # told first: a crash here leaves it to be buried again
        await self.queue.bury(entry, f"ref {ref}: {reason}")

    def _idle_s(self, lane: Lane) -> float:
        """How long an entry of ``lane`` may go untouched before another worker takes it."""
        return self.quick_reclaim_s if lane == "quick" else self.reclaim_after_s

    def _idle_ms(self, lane: Lane) -> int:
        """What this round reclaims from ``lane``: entries idle that long. Nothing (an idle no entry reaches) until
        every live holder has had a touch since this worker found Redis again after it could not reach it (or
        started): an outage makes every entry look idle, its holder's touches failing too."""
        idle_s = self._idle_s(lane)
        if time.monotonic() - self._back_at < idle_s / 3 + _TOUCH_MARGIN_S:
            return _NEVER_MS
        return int(idle_s * 1000)

    async def _keep(self, entry: Entry, done: asyncio.Event) -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), self._idle_s(entry.lane) / 3)
                return
            try:
                if not await self.queue.touch(self.name, entry.id, lane=entry.lane):
                    log.warning("%s: %s was taken over by another worker", self.name, entry.id)
                    return
            except StoreError:
                self._unheard = True


def _kind(body: str) -> str:
    """A stored item's kind, for a metric's label (never its text)."""
    try:
        return str(StoredAdapter.validate_json(body).kind)
    except ValidationError:
        return "unreadable"


async def attempts(executor: Executor, item: WorkItem, retry_after_s: Sequence[float] = RETRY_AFTER_S) -> None:
    """One process with no queue (``serve`` as one process, the demo): the same tries and the same words at the
    end as a worker's; only a crash of this process loses the item."""
    for attempt in range(1, MAX_DELIVERIES + 1):
        again = AGAIN.set(attempt > 1)
        try:
            await executor(item)
            return
        except Exception:
            log.exception("work %s (%s) failed (try %d of %d)", item.kind, item.channel, attempt, MAX_DELIVERIES)
        finally:
            AGAIN.reset(again)
        if attempt < MAX_DELIVERIES:
            await asyncio.sleep(retry_after_s[min(attempt, len(retry_after_s)) - 1])
    ref = uuid.uuid4().hex[:8]
    log.error("work %s (%s) given up after %d tries (ref %s)", item.kind, item.channel, MAX_DELIVERIES, ref)
    await executor.give_up(item, ref)
