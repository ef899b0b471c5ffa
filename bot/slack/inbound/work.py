"""The work a Slack front hands on: start or continue a conversation, apply a decision, stop or resume a run.

A front checks who may do what and enqueues a :data:`WorkItem`; :class:`Executor` does it (in the front's
own process when there are no workers, or in a :class:`Worker` that reads the queue). Every item is safe
to do twice: a message carries its Slack id (``request_id``), a decision its claim, Stop and Resume
their run's state — a queue entry whose worker died is simply done again by another.
"""

from __future__ import annotations

import functools
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Protocol

from bot.agent.engine import Engine
from bot.agent.engine_errors import (
    AlreadyHandled,
    EngineError,
    InterruptExpired,
    InvalidDecision,
    NotPending,
    NotYours,
    ResumeRefused,
    StoreLostMidRun,
    ThreadBusy,
)
from bot.agent.events import CallDecided
from bot.slack.inbound.access import AccessPolicy
from bot.slack.inbound.receipt import SLOW_S, Receipt, ended_as
from bot.slack.inbound.thread_reader import ThreadReader
from bot.slack.inbound.work_items import AUTOMATIC, Answer, Check, Converse, RunButton, WorkItem
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.progress_words import card_ending, form_refusal
from bot.slack.outbound.responses import usable
from bot.slack.outbound.thread_meta import CARD, THREAD, known_lang, thread_key
from bot.slack.outbound.words import language_of, say
from state import LeaseLost, StoreError, Ticket
from state.store import MetaStore
from state.timer_store import Timer

log = logging.getLogger(__name__)

STORE_DOWN, CLICK_LOST = "store_down", "click_lost"  # catalog keys: said in the asker's language




AGAIN: ContextVar[bool] = ContextVar("again", default=False)
"""Set while a work item is done again (its worker died, or a try failed): the same click, not a second one."""
DOUBLE_CLICK_S = 2.0
"""A person's second click this soon after their first is a double click, not a retry after an outage."""


class FollowupTurns(Protocol):
    """What a follow-up's turn tells its thread (:class:`bot.slack.followups.buttons.SlackFollowups`)."""

    clock: Callable[[], float]

    async def ran(self, timer: Timer, at: float) -> None: ...

    async def not_run(self, timer: Timer, key: str = ...) -> None: ...


class StartOutcomes(Protocol):
    """What a question's turn does to its offer and its run windows (:class:`bot.slack.inbound.offers.Offers`)."""

    async def taken(self, item: Converse, lang: str) -> None: ...

    async def not_taken(self, item: Converse) -> None: ...


class Executor:
    """Does one work item; tells the person in words when it cannot. Never raises."""

    def __init__(self, *, engine: Engine, meta: MetaStore, outbox: SlackOutbox, metrics: Metrics,
                 reader: ThreadReader | None = None, language: str = "auto",
                 access: AccessPolicy | None = None) -> None:
        self.engine = engine
        self.access = access
        """Who may set a card aside by writing in its thread (None: anyone, as in tests of the engine alone)."""
        self.language = language
        self.reader = reader
        self.meta = meta
        self.outbox = outbox
        self.metrics = metrics
        self.checks: Callable[[Check], Awaitable[None]] | None = None
        """Runs a scheduled check's occurrence (it says itself what went wrong, and never raises)."""
        self.followups: FollowupTurns | None = None
        self.offers: StartOutcomes | None = None
        self.close_card: Callable[[str, Callable[[str], str]], Awaitable[None]] | None = None
        """Brings a question's card to its final state (:meth:`bot.slack.render.Renderer.close_card`)."""

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
            elif item.user == AUTOMATIC:
                await self._carry_on(item)
            else:
                await self._button(item)
        except ThreadBusy:
            if isinstance(item, Converse) and await self.engine.handled(
                    thread_key(item.channel, str(item.thread_ts)), item.request_id):
                return  # the same message, taken meanwhile by another worker: nothing to tell
            await self._untaken(item)
            if (turn := self._followup(item)) is not None:
                return await turn[0].not_run(turn[1])  # nobody sent it: nobody to ask to send it again
            await self.outbox.tell(item.channel, item.user, say(await self._lang(item), "still_working"),
                                   item.thread_ts)
        except NotYours:  # a reply in a thread whose card waits for someone else: the card stays as it is
            await self._untaken(item)
            if (turn := self._followup(item)) is not None:
                return await turn[0].not_run(turn[1])
            await self.outbox.tell(item.channel, item.user, say(await self._lang(item), "card_waits"), item.thread_ts)
        except EngineError as exc:
            await self._timer_ended(item)
            await self._untaken(item, errored=True)
            if isinstance(item, Converse):
                log.warning("thread %s: %s", item.thread_ts, exc)
                lang = await self._lang(item)  # the engine's reason is English, for operators: quoted
                why = kit.escape(exc) if lang == "en" else kit.code(exc)
                await self.outbox.say(item.channel, str(item.thread_ts), say(lang, "could_not_start", why=why))
            else:
                lang = await self._lang(item)
                why = kit.escape(exc) if lang == "en" else kit.code(exc)
                await self.outbox.tell(item.channel, item.user, say(lang, "nothing_changed", why=why), item.thread_ts)
        except LeaseLost as exc:  # it could not renew in time and another worker took the thread: that one goes on
            log.warning("%s in thread %s stopped here: %s", item.kind, item.thread_ts, exc)
        except StoreLostMidRun as exc:  # taken, and maybe changed something: never "ask again" / "not recorded"
            await self._timer_ended(item)
            ref = uuid.uuid4().hex[:8]
            log.error("%s: run %s stopped here, the store away (ref %s): %s", item.kind, exc.run_id, ref, exc)
            lang = self._lang_without_store(item)
            if isinstance(item, Converse | Answer):  # a decision caught midway: whether its card is open is not known
                key = "store_lost_mid_run" if exc.applied or isinstance(item, Converse) else "click_lost_midway"
                await self.outbox.store_down(item.channel, say(lang, key), ref=ref, thread_ts=item.thread_ts,
                                             lang=lang, user=item.user if isinstance(item, Answer) else None)
        except StoreError as exc:
            ref = uuid.uuid4().hex[:8]  # the operator gets the details, the person a reference to them
            log.error("%s dropped (ref %s): %s", item.kind, ref, exc)
            await self._untaken(item)
            lang = self._lang_without_store(item)
            key = STORE_DOWN if isinstance(item, Converse) else CLICK_LOST
            await self.outbox.store_down(item.channel, say(lang, key), ref=ref, thread_ts=item.thread_ts,
                                         user=None if isinstance(item, Converse) else item.user, lang=lang)

    async def _untaken(self, item: WorkItem, *, errored: bool = False) -> None:
        """A question its thread may not have taken: if it did not, its offer is free again and its run windows get
        their slot back; if it did and its turn then ``errored``, the offer says who asked."""
        if not isinstance(item, Converse) or self.offers is None:
            return
        try:
            if not await self.engine.handled(thread_key(item.channel, str(item.thread_ts)), item.request_id):
                await self.offers.not_taken(item)
            elif errored:
                await self.offers.taken(item, await self._lang(item))
        except StoreError as exc:
            log.warning("the offer and run windows of %s left as they were: %s", item.request_id, exc)

    def _followup(self, item: WorkItem) -> tuple[FollowupTurns, Timer] | None:
        """The follow-up ``item`` is a turn of, with what tells its thread about it; None for anything else."""
        if isinstance(item, Converse) and item.timer is not None and self.followups is not None:
            return self.followups, item.timer
        return None

    async def _timer_ended(self, item: WorkItem) -> None:
        """A follow-up's turn that ended in an error: its announcement says whether it ran (its question taken) or
        not — never left "pending" with a Cancel that no longer cancels anything."""
        if (turn := self._followup(item)) is None:
            return
        turns, timer = turn
        try:
            if await self.engine.handled(thread_key(item.channel, str(item.thread_ts)), timer.request_id):
                await turns.ran(timer, turns.clock())
            else:
                await turns.not_run(timer, "fu_skipped_failed")
        except StoreError as exc:  # the store away: the follow-up's record says what it can once it is back
            log.warning("follow-up %s: its announcement not updated: %s", timer.id, exc)

    async def give_up(self, item: WorkItem, ref: str) -> None:
        """Say that ``item`` could not be done (every try failed): in the thread for a question or a check, to the
        person for a click. Keyed, so a second give-up of the same item edits the same message. A question its
        thread never took leaves its offer and run windows free."""
        await self._untaken(item, errored=True)
        try:
            lang = await self._lang(item)
        except StoreError:
            lang = language_of(item.text if isinstance(item, Converse) else "", self.language)
        if isinstance(item, Converse | Check):
            key = f"failed:{item.request_id}"
            await self.outbox.say(item.channel, item.thread_ts, say(lang, "work_failed", ref=ref), key=key)
        else:
            await self.outbox.tell(item.channel, item.user, say(lang, "click_failed", ref=ref), item.thread_ts)

    async def _converse(self, item: Converse) -> None:
        thread_ts = str(item.thread_ts)
        thread_id = thread_key(item.channel, thread_ts)
        known = (await self.meta.get(THREAD, thread_id)).get("lang")
        lang = known or item.lang or language_of(item.text, self.language)  # a thread keeps its first question's
        await self.meta.put(THREAD, thread_id, {"channel": item.channel, "thread_ts": thread_ts, "lang": lang})
        context = item.context
        if self.reader is not None and not context:
            context = await self.reader.context(item.channel, thread_ts, item.ts)
        if lang != language_of(item.text):  # e.g. "restart it" in a Chinese thread: say which to answer in
            context = f"<reply_language>{'Chinese' if lang == 'zh' else 'English'}</reply_language>\n{context}"
        access = self.access

        async def may_set_aside(ticket: Ticket) -> bool:
            # A follow-up (nobody typed it) never answers a person's card in their stead; Investigate's presser may.
            return item.timer is None and (access is None or (await access.may_decline(item.user, ticket)).allowed)

        turn = self._followup(item)
        started = turn[0].clock() if turn is not None else 0.0
        await self.engine.ask(thread_id, item.text, user_id=item.user, request_id=item.request_id, context=context,
                              unattended=item.unattended, may_set_aside=may_set_aside)
        if turn is not None:
            await turn[0].ran(turn[1], started)
        if self.offers is not None:  # taken: a failure to say so on the offer is no failure of the question
            try:
                await self.offers.taken(item, lang)
            except StoreError as exc:
                log.warning("the offer %s was taken, but could not say so: %s", item.request_id, exc)

    async def _closed(self, item: Answer, at: float) -> None:
        """The card of a decision its worker recorded and died before showing (that event is lost with it)."""
        p = item.ticket.pending
        try:
            pending = (await self.engine.run_record(item.ticket.run_id)).pending
        except EngineError:  # its run is gone: nothing to say of the card
            return
        if self.close_card is None or any(q.token == p.token for q in pending):
            return  # not decided (its clicker cut off before it was recorded): the card stays, to be pressed again
        kind = {"confirm": "confirmed", "submit": "submitted", "decline": "declined"}[item.decision]
        decided = CallDecided(run_id=item.ticket.run_id, thread_id=item.ticket.thread_id, seq=0, call_id=p.call.id,
                              tool=p.call.name, token=p.token, decision=kind, by=item.user, values=item.values, at=at)
        await self.close_card(p.token, functools.partial(card_ending, decided))

    async def _button(self, item: RunButton) -> None:
        """Stop or Resume pressed by a person. A run that has ended, is waiting on its card, or is moving again
        (a second Resume, a colleague's, a double click) is said as such: never silence, never "send it again"."""
        record = await self.engine.run_record(item.run_id)
        status = record.status
        if status == "finished" or (item.kind == "resume" and status == "paused"):
            key = "already_finished" if item.kind == "stop" else f"resume_{status}"
            return await self.outbox.tell(item.channel, item.user, say(await self._lang(item), key), item.thread_ts)
        if item.kind == "stop" and status == "paused" and self.access is not None:
            # A Stop turns its cards down: only who may decline each of them (else Stop got round Decline's rule)
            for pending in record.pending:  # (from the record: a card's ticket key may have lapsed before it did)
                ticket = Ticket(run_id=record.run_id, thread_id=record.thread_id, requester=record.user_id,
                                pending=pending)
                verdict = await self.access.may_decline(item.user, ticket)
                if not verdict.allowed:
                    words = verdict.words(await self._lang(item))
                    return await self.outbox.tell(item.channel, item.user, words, item.thread_ts)
        if item.kind == "stop":
            await self.engine.cancel(item.run_id, by=item.user)
            return
        try:
            await self.engine.recover(item.run_id)
        except ThreadBusy:  # taken a moment ago: most likely resumed by someone else
            await self.outbox.tell(item.channel, item.user, say(await self._lang(item), "resume_running"),
                                   item.thread_ts)

    async def _carry_on(self, item: RunButton) -> None:
        """Resume a run whose worker died mid-read, saying so in its thread once this worker holds it; quiet when
        its worker lives after all (the thread is busy) or the run moved on meanwhile."""
        lang = await self._lang(item)

        async def say_it() -> None:
            await self.outbox.say(item.channel, item.thread_ts, say(lang, "auto_resumed"),
                                  key=f"auto-resume:{item.run_id}")

        try:
            await self.engine.recover(item.run_id, on_taken=say_it)
        except (ThreadBusy, EngineError) as exc:
            log.info("run %s not carried on: %s", item.run_id, exc)

    async def _siblings(self, item: Answer) -> None:
        """The other calls of the step that asked for the same fields on the same form: the same answer,
        here in the work item (so a worker dying half-way leaves them to the redelivery, not to expiry)."""
        card = await self.meta.get(CARD, item.ticket.pending.token)
        for token in filter(None, card.get("siblings", "").split(",")):
            try:
                await self.engine.answer(await self.engine.ticket(token), item.to_decision(), by=item.user)
            except (ResumeRefused, InvalidDecision):
                continue  # answered already (the claim holds), expired, or no longer pending

    def _lang_without_store(self, item: WorkItem) -> str:
        """The thread's language with the store away: as last seen here, or decided on arrival, or from words."""
        known = known_lang(self.meta, item.channel, item.thread_ts) or (item.lang if isinstance(item, Converse)
                                                                        else None)
        return known or language_of(item.text if isinstance(item, Converse) else
                                    kit.shown(item.card) if isinstance(item, Answer) else "", self.language)

    async def _lang(self, item: WorkItem) -> str:
        """The thread's language, for what is said to one person in it."""
        if item.thread_ts is None:  # a scheduled check: its question's
            return language_of(item.question if isinstance(item, Check) else "", self.language)
        return (await self.meta.get(THREAD, thread_key(item.channel, item.thread_ts))).get("lang") or "en"

    async def _answer(self, item: Answer) -> None:
        token = item.ticket.pending.token
        # A card that has ended (a click redelivered after its worker died, a stale one) gets no "received… nothing
        # has run yet" while this click waits for its thread: that is not what happened.
        after_s = math.inf if await ended_as(self.meta, token) else SLOW_S
        receipt = Receipt(item.response_url, item.card, item.user, item.decision, language=self.language, token=token,
                          after_s=after_s)
        recorded = False
        try:
            recorded = await self._record(item, receipt)
        finally:
            if not recorded and receipt.shown and (ended := await ended_as(self.meta, token)):
                receipt.restore = ended[0]  # put back as it ended (answered by another click), not as it was
            await receipt.settle(recorded, self.meta, token)

    async def _record(self, item: Answer, receipt: Receipt) -> bool:
        """Record the decision (the card closes as its event is shown); False when it was not recorded."""
        ticket, decision = item.ticket, item.to_decision()
        if usable(item.response_url):  # read when its card closes (render.close_card), on this instance
            await self.meta.put(CARD, ticket.pending.token, {"response_url": item.response_url})
        try:
            await self.engine.answer(ticket, decision, by=item.user)
            self.metrics.inc("opspilot_interrupts_resolved_total", how=type(decision).__name__.lower())
            await self._siblings(item)
            return True
        except AlreadyHandled as exc:
            if exc.holder == item.user:  # redelivered after its worker died: finish what it left
                await self._siblings(item)
                if AGAIN.get():  # the same click done again: "already handled" about one's only click is not true
                    await self._closed(item, time.time() - exc.age_s)
                    return False
            lang = await self._lang(item)
            # How it ended, as its card says it ("answered in the thread instead" is not "handled by Alice").
            decided = str((await self.meta.get(CARD, ticket.pending.token)).get("decided", ""))
            # Their own click seconds ago, not decided since: cut off by an outage after it claimed the card (or still
            # being recorded) — not "handled", and pressable again. (A double click's first is simply handling it.)
            if exc.holder == item.user and not decided and exc.unsettled_s > 0 and exc.age_s >= DOUBLE_CLICK_S:
                await self.outbox.tell(item.channel, item.user, say(lang, "own_claim_unsettled",
                                                                    s=math.ceil(exc.unsettled_s)), item.thread_ts)
                return False
            text = say(lang, "request_expired") if exc.holder == "expiry" else \
                say(lang, "handled", how=f" ({decided})") if decided else \
                say(lang, "handled_by", by=f"<@{exc.holder}>")
            await self.outbox.tell(item.channel, item.user, text, item.thread_ts)
        except InterruptExpired:
            await self.outbox.tell(item.channel, item.user, say(await self._lang(item), "request_expired"),
                                   item.thread_ts)
            try:  # its card closes now, as the sweep would close it within seconds: no live button left behind
                await self.engine.expire_due(item.ticket.run_id)
            except (EngineError, StoreError) as exc:
                log.info("expired card of run %s left to the sweep: %s", item.ticket.run_id, exc)
        except NotPending:
            await self.outbox.tell(item.channel, item.user, say(await self._lang(item), "not_pending"),
                                   item.thread_ts)
        except InvalidDecision as exc:
            problem, token = str(exc), ticket.pending.token
            card = await self.meta.get(CARD, token)
            if card.get("channel"):  # the form stays, with the error shown, in the thread's language
                lang, pending = str(card.get("lang") or "en"), ticket.pending
                problem = say(lang, "form_invalid", problem=form_refusal(exc, lang))
                form = kit.params_form(token, pending.reason, pending.payload, error=problem, lang=lang,
                                       subject=kit.form_subject([pending.call.name], pending.arguments, lang))
                await receipt.hold()  # a receipt on its way lands before the form it gives way to
                await self.outbox.message(f"card:{token}", card["channel"], card.get("thread_ts"), problem, form)
                return True
        return False
