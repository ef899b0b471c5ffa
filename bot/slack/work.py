"""The work a Slack front hands on: start or continue a conversation, apply a decision, stop or resume a run.

A front checks who may do what and enqueues a :data:`WorkItem`; :class:`Executor` does it (in the front's
own process when there are no workers, or in a :class:`Worker` that reads the queue). Every item is safe
to do twice: a message carries its Slack id (``request_id``), a decision its claim, Stop and Resume
their run's state — a queue entry whose worker died is simply done again by another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from bot.agent.decisions import Confirm, Decision, Decline, ProvideParams
from bot.agent.engine import Engine
from bot.agent.errors import (
    AlreadyHandled,
    EngineError,
    InterruptExpired,
    InvalidDecision,
    NotPending,
    ResumeRefused,
    ThreadBusy,
)
from bot.slack import blocks as kit
from bot.slack.history import ThreadReader
from bot.slack.meta import CARD, THREAD, thread_key
from bot.slack.metrics import Metrics
from bot.slack.outbox import SlackOutbox
from bot.slack.words import language_of, say
from state import LeaseLost, StoreError, Ticket
from state.store import MetaStore, WorkQueue

log = logging.getLogger(__name__)

STORE_DOWN, CLICK_LOST = "store_down", "click_lost"  # catalog keys: said in the asker's language


class _Item(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    channel: str
    thread_ts: str | None
    user: str


class Converse(_Item):
    kind: Literal["converse"] = "converse"
    text: str
    request_id: str
    ts: str | None = None
    """The message's own ts, when it is a reply in a thread: the thread before it is read for the model."""
    context: str = ""
    """Quoted material that comes with the question (the alert or message it is about); already redacted."""
    unattended: bool = False
    """No person asked (an alert did): every change waits for a person's Confirm."""


class Answer(_Item):
    kind: Literal["answer"] = "answer"
    ticket: Ticket
    decision: Literal["confirm", "submit", "decline"]
    values: dict[str, str] = Field(default_factory=dict)
    reason: str = ""

    def to_decision(self) -> Decision:
        if self.decision == "confirm":
            return Confirm()
        if self.decision == "submit":
            return ProvideParams(dict(self.values))
        return Decline(self.reason)


class RunButton(_Item):
    kind: Literal["stop", "resume"]
    run_id: str


class Check(_Item):
    """One occurrence of a scheduled check (see :mod:`bot.slack.checks`): ``user`` is who set it up."""

    kind: Literal["check"] = "check"
    timer: str
    due: int
    request_id: str
    question: str
    label: str
    """What it is, as lists show it: its name or question, its cron and time zone."""
    quiet: bool = False
    late_s: float = 0.0


class NotYet(Exception):
    """A stored request that could not be read just now (Slack or Redis away): left for a later round."""


class Delivery(BaseModel):
    """A Slack request exactly as a front received it (after its signature was checked), stored before it is
    acknowledged; a worker reads it as the front would have and hands on what it means."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["delivery"] = "delivery"
    body: str
    content_type: str
    received_at: float


WorkItem = Annotated[Converse | Answer | RunButton | Check, Field(discriminator="kind")]
Stored = Annotated[Converse | Answer | RunButton | Check | Delivery, Field(discriminator="kind")]
StoredAdapter: TypeAdapter[Stored] = TypeAdapter(Stored)
WorkAdapter: TypeAdapter[WorkItem] = TypeAdapter(WorkItem)


class Executor:
    """Does one work item; tells the person in words when it cannot. Never raises."""

    def __init__(self, *, engine: Engine, meta: MetaStore, outbox: SlackOutbox, metrics: Metrics,
                 reader: ThreadReader | None = None, language: str = "auto") -> None:
        self.engine = engine
        self.language = language
        self.reader = reader
        self.meta = meta
        self.outbox = outbox
        self.metrics = metrics
        self.checks: Callable[[Check], Awaitable[None]] | None = None
        """Runs a scheduled check's occurrence (it says itself what went wrong, and never raises)."""

    async def __call__(self, item: WorkItem) -> None:
        if isinstance(item, Check):
            if self.checks is not None:
                await self.checks(item)
            return
        try:
            if isinstance(item, Converse):
                await self._converse(item)
            elif isinstance(item, Answer):
                await self._answer(item)
            elif item.kind == "stop":
                if (await self.engine.run_record(item.run_id)).status == "finished":
                    # A Stop pressed as the run ended, before its button was taken back: say so.
                    await self.outbox.tell(item.channel, item.user, say(await self._lang(item), "already_finished"),
                                           item.thread_ts)
                    return
                await self.engine.cancel(item.run_id, by=item.user)
            else:
                await self.engine.recover(item.run_id)
        except ThreadBusy:
            if isinstance(item, Converse) and await self.engine.handled(
                    thread_key(item.channel, str(item.thread_ts)), item.request_id):
                return  # the same message, taken meanwhile by another worker: nothing to tell
            await self.outbox.tell(item.channel, item.user, say(await self._lang(item), "still_working"),
                                   item.thread_ts)
        except EngineError as exc:
            if isinstance(item, Converse):
                log.warning("thread %s: %s", item.thread_ts, exc)
                lang = await self._lang(item)  # the engine's reason is English, for operators: quoted
                why = kit.escape(exc) if lang == "en" else f"`{kit.escape(exc)}`"
                await self.outbox.say(item.channel, str(item.thread_ts), say(lang, "could_not_start", why=why))
            else:
                lang = await self._lang(item)
                why = kit.escape(exc) if lang == "en" else f"`{kit.escape(exc)}`"
                await self.outbox.tell(item.channel, item.user, say(lang, "nothing_changed", why=why), item.thread_ts)
        except LeaseLost as exc:  # it could not renew in time and another worker took the thread: that one goes on
            log.warning("%s in thread %s stopped here: %s", item.kind, item.thread_ts, exc)
        except StoreError as exc:
            ref = uuid.uuid4().hex[:8]  # the operator gets the details, the person a reference to them
            log.error("%s dropped (ref %s): %s", item.kind, ref, exc)
            # The thread's language is in the store that is away: the question's, else the configured one.
            lang = language_of(item.text, self.language) if isinstance(item, Converse) else \
                language_of("", self.language)
            key = STORE_DOWN if isinstance(item, Converse) else CLICK_LOST
            await self.outbox.store_down(item.channel, say(lang, key), ref=ref, thread_ts=item.thread_ts,
                                         user=None if isinstance(item, Converse) else item.user, lang=lang)

    async def _converse(self, item: Converse) -> None:
        thread_ts = str(item.thread_ts)
        thread_id = thread_key(item.channel, thread_ts)
        known = (await self.meta.get(THREAD, thread_id)).get("lang")
        lang = known or language_of(item.text, self.language)  # a thread keeps its first question's language
        await self.meta.put(THREAD, thread_id, {"channel": item.channel, "thread_ts": thread_ts, "lang": lang})
        context = item.context
        if self.reader is not None and not context:
            context = await self.reader.context(item.channel, thread_ts, item.ts)
        if lang != language_of(item.text):  # e.g. "restart it" in a Chinese thread: say which to answer in
            context = f"<reply_language>{'Chinese' if lang == 'zh' else 'English'}</reply_language>\n{context}"
        await self.engine.ask(thread_id, item.text, user_id=item.user, request_id=item.request_id, context=context,
                              unattended=item.unattended)

    async def _siblings(self, item: Answer) -> None:
        """The other calls of the step that asked for the same fields on the same form: the same answer,
        here in the work item (so a worker dying half-way leaves them to the redelivery, not to expiry)."""
        card = await self.meta.get(CARD, item.ticket.pending.token)
        for token in filter(None, card.get("siblings", "").split(",")):
            try:
                await self.engine.answer(await self.engine.ticket(token), item.to_decision(), by=item.user)
            except (ResumeRefused, InvalidDecision):
                continue  # answered already (the claim holds), expired, or no longer pending

    async def _lang(self, item: WorkItem) -> str:
        """The thread's language, for what is said to one person in it."""
        if item.thread_ts is None:
            return "zh" if self.language == "zh" else "en"
        return (await self.meta.get(THREAD, thread_key(item.channel, item.thread_ts))).get("lang") or "en"

    async def _answer(self, item: Answer) -> None:
        ticket, decision = item.ticket, item.to_decision()
        try:
            await self.engine.answer(ticket, decision, by=item.user)
            self.metrics.inc("opspilot_interrupts_resolved_total", how=type(decision).__name__.lower())
            await self._siblings(item)
        except AlreadyHandled as exc:
            if exc.holder == item.user:  # redelivered after its worker died: finish what it left
                await self._siblings(item)
            # (A decision redelivered after its worker died lands here too: applied once, its author told so.)
            lang = await self._lang(item)
            # How it ended, as its card says it ("answered in the thread instead" is not "handled by Alice").
            decided = str((await self.meta.get(CARD, ticket.pending.token)).get("decided", ""))
            text = say(lang, "request_expired") if exc.holder == "expiry" else \
                say(lang, "handled", how=f" ({decided})") if decided else \
                say(lang, "handled_by", by=f"<@{exc.holder}>")
            await self.outbox.tell(item.channel, item.user, text, item.thread_ts)
        except InterruptExpired:
            await self.outbox.tell(item.channel, item.user, say(await self._lang(item), "request_expired"),
                                   item.thread_ts)
        except NotPending:
            await self.outbox.tell(item.channel, item.user, say(await self._lang(item), "not_pending"),
                                   item.thread_ts)
        except InvalidDecision as exc:
            problem, token = str(exc), ticket.pending.token
            card = await self.meta.get(CARD, token)
            if card.get("channel"):  # the form stays, with the error shown, in the thread's language
                lang, pending = str(card.get("lang") or "en"), ticket.pending
                problem = say(lang, "form_invalid", problem=problem if lang == "en" else f"`{problem}`")
                form = kit.params_form(token, pending.reason, pending.payload, error=problem, lang=lang,
                                       subject=kit.form_subject([pending.call.name], pending.arguments, lang))
                await self.outbox.message(f"card:{token}", card["channel"], card.get("thread_ts"), problem, form)


MAX_DELIVERIES = 5
READ_WINDOW_S = 10.0
"""A worker that has not read the queue for this long does not count as reading it (readiness)."""
BEAT_S = 2.0


class Worker:
    """Reads the work queue and does each item, touching it while busy; claims what dead workers left."""

    def __init__(self, *, queue: WorkQueue, executor: Executor, concurrency: int = 64,
                 reclaim_after_s: float = 45.0,
                 deliveries: Callable[[Delivery, str], Awaitable[None]] | None = None) -> None:
        self.queue = queue
        self.executor = executor
        self.deliveries = deliveries
        self.name = f"worker-{uuid.uuid4().hex[:8]}"
        self.reclaim_after_s = reclaim_after_s
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.Task[None] | None = None
        self._beats: asyncio.Task[None] | None = None
        self._read_at = float("-inf")

    def start(self) -> None:
        if self._loop is None or self._loop.done():
            self._loop = asyncio.create_task(self._forever(), name=self.name)
        if self._beats is None or self._beats.done():
            self._beats = asyncio.create_task(self._beat(), name=f"{self.name}-beat")

    async def stop(self) -> None:
        for task in (self._beats, self._loop):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
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
        while True:
            if self.reading():
                try:
                    await self.queue.beat(self.name)
                    told = True
                except StoreError as exc:
                    log.debug("%s: could not report reading (%s)", self.name, exc)
            await asyncio.sleep(BEAT_S if told else 0.1)  # the first read is told at once

    async def _forever(self) -> None:
        while True:
            try:
                await self.round()
            except StoreError as exc:
                log.warning("%s: the queue is unavailable (%s)", self.name, exc)
                await asyncio.sleep(1.0)
            except Exception:
                log.exception("%s: reading work failed", self.name)
                await asyncio.sleep(1.0)

    async def round(self, block_ms: int = 1000) -> int:
        """Take what is there (and what dead workers left) and start on it; returns how many."""
        await self._slots.acquire()
        self._slots.release()
        entries = await self.queue.reclaim(self.name, idle_ms=int(self.reclaim_after_s * 1000))
        entries += await self.queue.take(self.name, count=8, block_ms=block_ms)
        self._read_at = time.monotonic()
        for entry in entries:
            if entry.deliveries > MAX_DELIVERIES:  # it took down every worker that tried: set it aside
                log.error("%s: %s was handed out %d times without finishing; dropped: %s", self.name, entry.id,
                          entry.deliveries, entry.body[:500])
                await self.queue.ack(entry.id)
                continue
            if entry.deliveries > 1:
                log.warning("%s: %s is done again (its worker stopped)", self.name, entry.id)
            task = asyncio.create_task(self._do(entry.id, entry.body), name=f"work-{entry.id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return len(entries)

    async def _do(self, entry_id: str, body: str) -> None:
        keeper = asyncio.create_task(self._keep(entry_id))  # also while it waits for a slot
        try:
            async with self._slots:
                try:
                    item = StoredAdapter.validate_json(body)
                except ValidationError as exc:
                    log.error("%s: unreadable work %s dropped: %s", self.name, entry_id, exc)
                else:
                    try:
                        if isinstance(item, Delivery):
                            if self.deliveries is None:
                                raise RuntimeError("a stored Slack request, and nothing here reads those")
                            # Its work items are enqueued before this one is acknowledged below: a worker that
                            # dies in between leaves it to be read again (the dedupe recognises this entry).
                            await self.deliveries(item, entry_id)
                        else:
                            await self.executor(item)
                    except (StoreError, NotYet) as exc:  # an outage, not a bug: left unacknowledged, done again
                        log.warning("%s: work %s (%s) waits for Redis: %s", self.name, entry_id, item.kind, exc)
                        return
                    except Exception:  # a bug, not an outage: doing it again would fail again
                        log.exception("%s: work %s (%s) failed", self.name, entry_id, item.kind)
        finally:
            keeper.cancel()
        await self.queue.ack(entry_id)

    async def _keep(self, entry_id: str) -> None:
        while True:
            await asyncio.sleep(self.reclaim_after_s / 3)
            with contextlib.suppress(StoreError):
                if not await self.queue.touch(self.name, entry_id):
                    log.warning("%s: %s was taken over by another worker", self.name, entry_id)
                    return
