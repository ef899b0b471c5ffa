"""Alerts where they fire: a bot message from a configured alert source starts an investigation in its own
thread (or offers an **Investigate** button), once per alert group, within a per-channel rate limit (a sliding
window: never more than ``max_runs`` automatic runs in any ``rate_window_s``).

An automatic run is *unattended*: the alert source is its requester of record, and every change it proposes
waits for a person's Confirm (the runtime's gate, not the prompt, enforces it).

Once investigated, the thread is the colleagues' too: OpsPilot answers there only when mentioned
(``follow_up: mention``), and its own status notes (fired again, resolved) are posted under a key
:mod:`bot.slack.inbound.thread_reader` recognises, so a later question is told them as OpsPilot's.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from bot.agent.engine import Engine
from bot.config import AlertSource, SlackConfig
from bot.slack.alerts.parsing import Alert, parse
from bot.slack.inbound.run_gate import RunGate
from bot.slack.inbound.thread_log import alert_events, log_alert
from bot.slack.inbound.thread_reader import STATUS_NOTE, material, message_text, quote_thread
from bot.slack.inbound.work_items import Converse, Offered, Slots, WorkItem
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.thread_meta import STORM, thread_key
from bot.slack.outbound.words import language_of, say
from core.redact import redact
from state.meta_store import DEDUPE_MARK
from state.store import MetaStore
from state.store_errors import StoreError

log = logging.getLogger(__name__)

ALERT = "slack-alert"  # meta kind: per channel and alert group, the thread investigating it
INVESTIGATE = "opspilot_investigate"
OFFER_S = 7 * 24 * 3600
"""An Investigate press holds its alert's offer this long (as long as the thread is kept), once its run started."""
THREADS_KEPT = 8
"""An alert group's threads remembered, newest last (each one's summary learns the group resolved)."""
CLAIM_MIN_S = 60
"""An alert group's claim holds this long even with no dedupe window: the run it starts is under way only once a
worker takes it, and a repeat before then would start another."""


class Alerts:
    def __init__(self, *, config: SlackConfig, engine: Engine, meta: MetaStore, outbox: SlackOutbox,
                 dispatch: Callable[[WorkItem], Awaitable[None]], services: Collection[str] = (),
                 environments: Collection[str] = (), clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.engine = engine
        self.meta = meta
        self.outbox = outbox
        self.dispatch = dispatch
        self.services = frozenset(s.lower() for s in services)
        self.environments = frozenset(e.lower() for e in environments)
        self.clock = clock
        self.gate: RunGate | None = None
        """The channel's window for every run (besides the alert source's own): an alert run counts in it."""

    async def on_alert(self, event: dict[str, Any], source: AlertSource) -> None:
        alert = parse(event, services=self.services, environments=self.environments)
        channel, ts = str(event["channel"]), str(event["ts"])
        if alert is None or event.get("thread_ts") not in (None, ts):
            return  # not an alert, or a bot's reply inside a thread
        edit = bool(event.get("edited"))  # an alert edited in place: only its resolution is news, and only once
        seen = f"alert-message:{channel}:{ts}" + (":resolved" if edit else "")
        if (edit and alert.status != "resolved") or not await self.meta.first_time(seen):
            return  # the same message delivered again, an edit that still fires, a resolution already said
        group = f"{channel}:{alert.key}"
        known = await self.meta.get(ALERT, group)
        lang = known.get("lang") or language_of(message_text(event), self.config.language)
        # when it was said (its message, or its edit), not when it reached us: a delivery held back by Slack's
        # retries must not make an alert look longer firing than it was
        said_ts = str((event.get("edited") or {}).get("ts") or ts) if edit else ts
        when = kit.hhmm(_posted_at(said_ts, self.clock()), self.clock())
        if alert.status == "resolved":
            if float(ts) > float(known.get("resolved_ts") or 0):  # its latest: a repeat older than it is over too
                # nothing firing any more: a later firing is a new one, not "partly resolved" against the old count
                await self.meta.put(ALERT, group, {"resolved_ts": ts, "resolved_at": when, "count": "0"})
            if known.get("thread_ts"):
                # Every thread the group had (a repeat past the dedupe window opens a new one): none is left
                # "still firing" in its summary or the handover once the group resolved.
                for earlier in dict.fromkeys([*known.get("threads", "").split(","), known["thread_ts"]]):
                    said = await alert_events(self.meta, channel, earlier) if earlier != known["thread_ts"] else []
                    if earlier and not (said and said[-1].kind == "resolved"):  # an older one resolved already
                        await log_alert(self.meta, channel, earlier, "resolved", self.clock(), title=alert.title)
                await self._note(channel, known["thread_ts"], f"{ts}:resolved" if edit else ts,
                                 ":white_check_mark: " + say(lang, "alert_resolved", at=when,
                                                             title=kit.code(alert.title)))  # the alert's words: data
                if (await self.meta.get(ALERT, f"{channel}:{known['thread_ts']}")).get("offered"):
                    await self._offer(channel, known["thread_ts"], lang, say(lang, "alert_offer_resolved", at=when))
            return
        if float(known.get("resolved_ts") or 0) > float(ts) and known.get("thread_ts"):
            return  # a repeat delivered after the resolution that followed it (Slack keeps no order): nothing new
        if float(known.get("resolved_ts") or 0) > float(ts) and not known.get("thread_ts"):
            await log_alert(self.meta, channel, ts, "fired", _posted_at(ts, self.clock()), title=alert.title)
            await log_alert(self.meta, channel, ts, "resolved", self.clock(), title=alert.title)
            await self._note(channel, ts, known["resolved_ts"], ":white_check_mark: " + say(
                lang, "alert_resolved", at=known.get("resolved_at") or when, title=kit.code(alert.title)))
            return  # not investigated: it was resolved before OpsPilot heard it fire
        earlier = known.get("thread_ts", "")
        ongoing = earlier if earlier and await self.engine.under_way(thread_key(channel, earlier)) else ""
        # One claim per alert group, one script: deliveries at the same moment (two workers, a repeat a second
        # later) all read the one thread it names; only its claimer investigates, the others say it fired again.
        thread_ts = await self.meta.claim(f"alert:{group}", ongoing or ts,
                                          ttl_s=max(source.dedupe_window_s, CLAIM_MIN_S))
        if thread_ts != ts:
            log.info("alert %s in %s fired again: noted in thread %s", alert.group, channel, thread_ts)
            before = int(known.get("count") or 0)
            gone = alert.resolved or max(before - alert.count, 0)  # some resolved: the news, not a repeat
            await log_alert(self.meta, channel, thread_ts, "partly_resolved" if gone else "fired_again", self.clock(),
                            count=alert.count)
            await self.meta.put(ALERT, group, {"count": str(alert.count)})
            if gone:
                return await self._note(channel, thread_ts, ts, ":white_check_mark: " + say(
                    lang, "alert_partly_resolved", at=when, n=alert.count, resolved=gone))
            looked = await self.engine.knows_thread(thread_key(channel, thread_ts))  # "already looked at": if so
            await self._note(channel, thread_ts, ts, ":repeat: " + say(
                lang, "alert_fired_again" if looked else "alert_fired_again_unseen", at=when, n=alert.count))
            return
        # Kept unquoted: each run quotes it afresh (a new nonce per request, the Investigate button's included).
        context = redact(material([event], ts, 1, self.config.thread_context_chars, here=channel))
        had = [*known.get("threads", "").split(","), known.get("thread_ts", ""), ts]
        threads = ",".join(list(dict.fromkeys(t for t in had if t))[-THREADS_KEPT:])
        await self.meta.put(ALERT, group, {"thread_ts": ts, "threads": threads, "title": alert.title[:300],
                                           "context": context,
                                           "count": str(alert.count),
                                           "lang": lang, "label": alert.label(), "service": alert.service or "",
                                           "environment": alert.environment or ""})
        await self.meta.put(ALERT, f"{channel}:{ts}", {"group": group, "follow_up": source.follow_up})
        await log_alert(self.meta, channel, ts, "fired", _posted_at(ts, self.clock()), title=alert.title,
                        count=alert.count)
        if source.mode == "button":
            await self._offer(channel, ts, lang, say(lang, "alert_offer"))
            return
        if not await self._within_rate(source, f"{channel}:{ts}", lang):
            return await self._offer(channel, ts, lang, say(lang, "alert_held", n=source.max_runs,
                                                            minutes=f"{source.rate_window_s / 60:g}"))
        if self.gate is not None and not await self.gate.admit("alert", user="", channel=channel, lang=lang,
                                                               member=f"alert:{channel}:{ts}", thread_ts=ts):
            # Nothing ran: its slot in the storm's budget goes back (busy refusals made a storm of one run)
            await self.meta.withdraw(f"alert-runs:{source.channel}", f"{channel}:{ts}")
            return await self._offer(channel, ts, lang, say(lang, "alert_busy"))
        await self.dispatch(self._converse(alert, channel, ts, context, requester=_source_id(event), lang=lang))

    async def answers_unmentioned(self, channel: str, thread_ts: str) -> bool:
        """Whether a reply in this thread that does not mention OpsPilot is for it: in an alert's thread only
        with ``follow_up: all`` (colleagues coordinating there are not talking to it)."""
        known = await self.meta.get(ALERT, f"{channel}:{thread_ts}")
        if not known.get("group"):
            return True  # not an alert's thread
        policy = known.get("follow_up") or next(
            (s.follow_up for s in self.config.alert_sources if s.channel == channel), "mention")
        return policy == "all"

    async def language(self, channel: str, alert_ts: str) -> str:
        """The language of the alert posted at ``alert_ts`` (its thread's, once investigated)."""
        group = (await self.meta.get(ALERT, f"{channel}:{alert_ts}")).get("group", "")
        known = await self.meta.get(ALERT, group) if group else {}
        return known.get("lang") or language_of("", self.config.language)

    async def investigate(self, channel: str, alert_ts: str, user: str, slots: Slots | None = None) -> str | None:
        """Someone pressed Investigate under an alert: its run starts, with that person as the requester, as
        unattended as an automatic one. The offer is claimed now (a second press is told "already on it") and says
        who asked once the worker's turn takes the question (:mod:`bot.slack.inbound.offers`); a thread that does
        not take it (busy, a card waiting on someone else) leaves the offer as it was.
        Returns what to tell them when it does not."""
        group = (await self.meta.get(ALERT, f"{channel}:{alert_ts}")).get("group", "")
        known = await self.meta.get(ALERT, group) if group else {}
        lang = known.get("lang") or language_of("", self.config.language)
        if not known.get("context"):
            return say(lang, "alert_too_old")
        # This delivery's own: read again (its worker died) it holds the claim still; a double click does not.
        holder = f"investigate:{channel}:{alert_ts}:{user}:{DEDUPE_MARK.get() or uuid.uuid4().hex}"
        offered = Offered(kind="investigate", claim=f"investigate:{channel}:{alert_ts}", holder=holder)
        if await self.meta.claim(offered.claim, holder, OFFER_S) != holder:
            return say(lang, "alert_on_it")
        alert = Alert("firing", known.get("title", "an alert"), group, service=known.get("service") or None,
                      environment=known.get("environment") or None)
        # An alert's run all the same (unattended): the question is the alert's, not theirs — a change its text
        # asks for (or a model obeying it) waits for a person's Confirm, and what no person asked for (a rollback,
        # a follow-up) is an alert run's to refuse, as when it starts by itself.
        item = self._converse(alert, channel, alert_ts, known["context"], requester=user, lang=lang)
        try:
            await self.dispatch(item.model_copy(update={"offered": offered, "slots": slots}))
        except BaseException:  # not handed on: nobody is on it, so the offer stays free
            with contextlib.suppress(StoreError):
                await self.meta.unclaim(offered.claim, holder)
            raise
        return None

    def _converse(self, alert: Alert, channel: str, ts: str, context: str, *, requester: str, lang: str) -> Converse:
        return Converse(channel=channel, thread_ts=ts, user=requester, text=alert.question(lang),
                        request_id=f"{channel}:{ts}:alert", context=quote_thread(context), unattended=True)

    async def _within_rate(self, source: AlertSource, member: str, lang: str) -> bool:
        admission = await self.meta.admit(f"alert-runs:{source.channel}", member, limit=source.max_runs,
                                          window_s=source.rate_window_s, now=self.clock())
        if admission.admitted:
            return True
        until = kit.hhmm(admission.free_at, self.clock())
        if admission.first_refusal:
            log.warning("alert storm in %s: automatic investigations held back until %s", source.channel, until)
        # Said once per storm, under its own key, by whichever refusal finds it not yet put: a front killed between
        # the first refusal and its note leaves it to the next one (one message, never posted twice), and once it is
        # put the rest of the storm costs one read each, not a put and an edit.
        key = f"alert-storm:{source.channel}:{admission.told_until:.0f}"
        if not (await self.meta.get(STORM, key)).get("said"):
            await self.outbox.say(source.channel, None, ":rotating_light: " + say(
                lang, "alert_storm", until=until, n=source.max_runs, minutes=f"{source.rate_window_s / 60:g}"), key=key)
            await self.meta.put(STORM, key, {"said": "1"})
        return False

    async def _note(self, channel: str, thread_ts: str, about_ts: str, text: str) -> None:
        """One of OpsPilot's status notes in an alert's thread (read back to the model as its own), one per alert
        message it is about (that message delivered again says nothing new)."""
        await self.outbox.say(channel, thread_ts, text, key=f"{STATUS_NOTE}{about_ts}")

    async def _offer(self, channel: str, ts: str, lang: str, text: str) -> None:
        blocks = [kit.mrkdwn(text), {"type": "actions", "elements": [
            kit.button(say(lang, "investigate"), INVESTIGATE, ts, style="primary")]}]
        await self.meta.put(ALERT, f"{channel}:{ts}", {"offered": "1"})  # its resolution edits it (not a new one)
        await self.outbox.message(f"alert-offer:{ts}", channel, ts, text, blocks)


def _posted_at(ts: str, default: float) -> float:
    try:
        return float(ts)  # a Slack ts is when the message was posted
    except ValueError:
        return default


def _source_id(event: dict[str, Any]) -> str:
    return str(event.get("bot_id") or event.get("app_id") or event.get("username") or "alert")
