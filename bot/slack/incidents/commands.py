"""The ways to ask for an incident summary or a handover, read into calls of :mod:`bot.slack.incidents.canvas` and
:mod:`bot.slack.incidents.handover`: "@OpsPilot summarize" in a thread, ``/opspilot summary <link or ts>`` (a slash
command carries no thread, so it names one), the message shortcut "Summarize this incident", and
``/opspilot handover [hours]``. Who may ask: whoever may use OpsPilot in that channel."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bot.agent.engine import Engine
from bot.slack.inbound.access import AccessPolicy
from bot.slack.inbound.run_gate import Admitted, Door, RunGate
from bot.slack.incidents.canvas import Summaries, thread_of
from bot.slack.incidents.handover import Handover, hours_of
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.responses import respond
from bot.slack.outbound.thread_meta import THREAD, thread_key
from bot.slack.outbound.words import language_of, say, signal
from state.memory import MemoryStore
from state.redis import RedisStore
from state.store import MetaStore, Reports

log = logging.getLogger(__name__)

SUMMARIZED = "summarized"  # a summary request whose summary is published (meta kind, by request): once

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
        """A summary is a model call like a run's, a handover a post in the channel: both count in the person's
        and the channel's windows."""
        self.person_language: Callable[[str], Awaitable[str]] | None = None
        """The person's latest thread's language (App Home's): a command with no words of its own speaks it."""

    @staticmethod
    def asks_summary(text: str) -> bool:
        return bool(_SUMMARIZE.match(text))

    async def on_mention(self, channel: str, thread_ts: str, ts: str, user: str, text: str) -> bool:
        """True when the message asked for a summary (and was handled): only in a thread."""
        if thread_ts == ts or not self.asks_summary(text) or self.summaries is None:
            return False
        await self._summarize(user, channel, thread_ts, f"summarize:{channel}:{ts}", asked=text)
        return True

    async def _summarize(self, user: str, channel: str, thread_ts: str, member: str, *, asked: str = "",
                         in_thread: bool = True) -> None:
        """A summary within the windows; one with nothing to summarise (no model call) gives its slot back."""
        if (await self.meta.get(SUMMARIZED, member)).get("at"):
            return  # read again after it was published (its worker died before acknowledging it): once
        admitted = await self._admit("summarize", user, channel, thread_ts if in_thread else None, member)
        if not admitted or self.summaries is None:
            return
        made = await self.summaries.summarize(channel, thread_ts, user, asked=asked, in_thread=in_thread)
        if made:  # a file shared again, or a second model call, would be the same summary twice
            await self.meta.put(SUMMARIZED, member, {"at": f"{time.time():.0f}"})
        elif self.gate is not None:
            await self.gate.give_back(admitted)

    async def _admit(self, door: Door, user: str, channel: str, thread_ts: str | None,
                     member: str) -> Admitted | None:
        if self.gate is None:
            return Admitted(member)
        lang = (await self.meta.get(THREAD, thread_key(channel, thread_ts or "-"))).get("lang") or \
            await self._speaks(user, "")
        return await self.gate.admit(door, user=user, channel=channel, member=member, lang=lang,
                                     thread_ts=thread_ts)

    async def _speaks(self, user: str, words: str) -> str:
        """What to say to ``user`` about a command: the configured language, else that of its words, else (none,
        or only a number) their latest thread's."""
        if self.language in ("en", "zh"):
            return self.language
        return signal(words) or (await self.person_language(user) if self.person_language is not None else "en")

    async def on_command(self, channel: str, user: str, text: str, *, trigger: str) -> bool:
        """True when ``text`` was a ``summary`` or ``handover`` subcommand (and was handled). ``trigger``: the
        command's own id (a replay of it was turned away before), which names this one start for the limits."""
        word, _, rest = text.strip().partition(" ")
        word = word.lower()
        if word not in ("summary", "summarize", "summarise", "handover"):
            return False
        lang = await self._speaks(user, rest)
        if word == "handover":
            hours = hours_of(rest)
            if hours is None or self.handover is None:
                await self.outbox.tell(channel, user, say(lang, "ho_usage"))
                return True
            if not await self._admit("handover", user, channel, None, f"handover:{trigger}"):
                return True  # a post in the channel each: as limited as a run
            said = await self.handover.text(channel, hours, lang)
            for i, blocks in enumerate(kit.split_answer(said, lang)):  # whole: one section holds 3,000 characters
                await self.outbox.message(f"handover:{trigger}:{i}", channel, None, kit.fallback_text(said), blocks)
            return True
        thread_ts = thread_of(rest, channel) if rest.strip() else None
        if thread_ts is None or self.summaries is None:
            await self.outbox.tell(channel, user, say(lang, "inc_usage" if not rest.strip() else "inc_bad_ref"))
            return True
        await self._summarize(user, channel, thread_ts, f"summarize:command:{trigger}", in_thread=False)
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
        if self.summaries is not None:
            await self._summarize(user, channel, thread_ts, f"summarize:{trigger}")
