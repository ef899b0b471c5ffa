"""The ways to ask for an incident summary or a handover, read into calls of :mod:`bot.slack.incidents.canvas` and
:mod:`bot.slack.incidents.handover`: "@OpsPilot summarize" in a thread, ``/opspilot summary <link or ts>`` (a slash
command carries no thread, so it names one), the message shortcut "Summarize this incident", and
``/opspilot handover [hours]``. Who may ask: whoever may use OpsPilot in that channel."""

from __future__ import annotations

import logging
import re
from typing import Any

from bot.agent.engine import Engine
from bot.slack.inbound.access import AccessPolicy
from bot.slack.inbound.run_gate import RunGate
from bot.slack.incidents.canvas import Summaries, thread_of
from bot.slack.incidents.handover import Handover, hours_of
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.responses import respond
from bot.slack.outbound.thread_meta import THREAD, thread_key
from bot.slack.outbound.words import language_of, say
from state.memory import MemoryStore
from state.redis import RedisStore
from state.store import MetaStore, Reports

log = logging.getLogger(__name__)

SHORTCUT = "opspilot_summarize_incident"
_SUMMARIZE = re.compile(r"^\s*(?:please\s+)?(?:summari[sz]e|summary|总结|汇总|小结)(?:\s+(?:this|it|这个|一下))?"
                        r"(?:\s+(?:incident|thread|事件|线程))?\s*[.!。！]?\s*$", re.I)


class IncidentCommands:
    def __init__(self, *, engine: Engine, meta: MetaStore, outbox: SlackOutbox, access: AccessPolicy,
                 reports: Reports | None) -> None:
        store = engine.deps.store
        self.access, self.outbox, self.meta = access, outbox, meta
        self.language = access.config.language
        # Summaries read the records back: only the stores this build has can (never anything else).
        usable = store if isinstance(store, RedisStore | MemoryStore) else None
        self.summaries = Summaries(client=access.client, store=usable, meta=meta, reports=reports or usable,
                                   model=engine.deps.model, outbox=outbox, language=self.language,
                                   timezones=access.config.channel_timezones) \
            if usable is not None and (reports or usable) is not None else None
        self.handover = Handover(client=access.client, store=usable, meta=meta) if usable is not None else None
        self.gate: RunGate | None = None
        """A summary is a model call like a run's: it counts in the person's and the channel's windows."""

    @staticmethod
    def asks_summary(text: str) -> bool:
        return bool(_SUMMARIZE.match(text))

    async def on_mention(self, channel: str, thread_ts: str, ts: str, user: str, text: str) -> bool:
        """True when the message asked for a summary (and was handled): only in a thread."""
        if thread_ts == ts or not self.asks_summary(text) or self.summaries is None:
            return False
        if await self._admit(user, channel, thread_ts, f"summarize:{channel}:{ts}"):
            await self.summaries.summarize(channel, thread_ts, user, asked=text)
        return True

    async def _admit(self, user: str, channel: str, thread_ts: str | None, member: str) -> bool:
        if self.gate is None:
            return True
        lang = (await self.meta.get(THREAD, thread_key(channel, thread_ts or "-"))).get("lang") or \
            language_of("", self.language)
        return await self.gate.admit("summarize", user=user, channel=channel, member=member, lang=lang,
                                     thread_ts=thread_ts)

    async def on_command(self, channel: str, user: str, text: str, *, trigger: str) -> bool:
        """True when ``text`` was a ``summary`` or ``handover`` subcommand (and was handled). ``trigger``: the
        command's own id (a replay of it was turned away before), which names this one start for the limits."""
        word, _, rest = text.strip().partition(" ")
        word = word.lower()
        if word not in ("summary", "summarize", "summarise", "handover"):
            return False
        lang = language_of(rest, self.language)
        if word == "handover":
            hours = hours_of(rest)
            if hours is None or self.handover is None:
                await self.outbox.tell(channel, user, say(lang, "ho_usage"))
                return True
            said = await self.handover.text(channel, hours, lang)
            for i, blocks in enumerate(kit.split_answer(said, lang)):  # whole: one section holds 3,000 characters
                await self.outbox.message(f"handover:{trigger}:{i}", channel, None, kit.fallback_text(said), blocks)
            return True
        thread_ts = thread_of(rest, channel) if rest.strip() else None
        if thread_ts is None or self.summaries is None:
            await self.outbox.tell(channel, user, say(lang, "inc_usage" if not rest.strip() else "inc_bad_ref"))
            return True
        if await self._admit(user, channel, None, f"summarize:command:{trigger}"):  # each one counts
            await self.summaries.summarize(channel, thread_ts, user, in_thread=False)
        return True

    async def on_shortcut(self, body: dict[str, Any]) -> None:
        user, channel = str(body["user"]["id"]), str((body.get("channel") or {}).get("id"))
        message = body.get("message") or {}
        thread_ts = str(message.get("thread_ts") or message.get("ts") or "")
        trigger = str(body.get("trigger_id") or f"{channel}:{thread_ts}:{user}")
        if not thread_ts or not await self.meta.first_time(f"shortcut:{trigger}"):
            return
        verdict = await self.access.may_start(user, channel)
        if not verdict.allowed:
            lang = (await self.meta.get(THREAD, thread_key(channel, thread_ts))).get("lang") or \
                language_of("", self.language)
            if verdict.unpostable:  # a DM between people, a channel OpsPilot is not in: said where it can be
                await respond(str(body.get("response_url") or ""), verdict.words(lang))
            else:
                await self.outbox.tell(channel, user, verdict.words(lang), thread_ts)
            return
        if self.summaries is not None and await self._admit(user, channel, thread_ts, f"summarize:{trigger}"):
            await self.summaries.summarize(channel, thread_ts, user)
