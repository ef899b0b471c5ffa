"""App Home: what OpsPilot has for the person who opens it — the questions waiting for them (cards they may
answer, with a link to the thread), their recent questions, the last changes from the audit stream and the latest
answers rated 👎 (why, and a link to each); for someone who may not use OpsPilot, that they may not and whom to ask.
Every item about a conversation is listed only to people who can read it in Slack
(:mod:`bot.slack.inbound.visibility`)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.engine import Engine
from bot.slack.feedback import home_lines
from bot.slack.inbound.access import AccessPolicy
from bot.slack.inbound.visibility import Visibility
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.api_errors import SLACK_FAILURES, may_have_acted, rate_limited, slack_error
from bot.slack.outbound.audit import audit_line
from bot.slack.outbound.people import People
from bot.slack.outbound.thread_meta import THREAD, channel_of, thread_key
from bot.slack.outbound.words import say, signal
from state import StoreError
from state.store import MetaStore, Reports

log = logging.getLogger(__name__)
PUBLISH_TRIES = 3

RECENT = 5  # questions per person kept for the Home tab
CHANGES_READ = 100


def recent_key(user: str) -> str:
    return f"recent:{user}"


def thread_link(channel: str, thread_ts: str, label: str) -> str:
    return f"<https://slack.com/archives/{channel}/p{thread_ts.replace('.', '')}|{kit.escape(label)}>"


class Home:
    def __init__(self, *, client: AsyncWebClient, engine: Engine, meta: MetaStore, reports: Reports,
                 access: AccessPolicy, people: People | None = None, no_model: bool = False,
                 visibility: Visibility | None = None) -> None:
        self.client = client
        self.visibility = visibility or Visibility(client, access)
        self.no_model = no_model  # no model key: said at the top, so nobody mistakes demo answers for theirs
        self.people = people or People(client)
        self.engine = engine
        self.meta = meta
        self.reports = reports
        self.access = access
        self.timers: Callable[[str, str], Awaitable[list[kit.Block]]] | None = None
        """The person's follow-ups and schedules, each with Cancel (set where they exist)."""

    async def asked(self, user: str, channel: str, thread_ts: str, text: str) -> None:
        """Remember a question for its asker's Home tab."""
        entry = {"channel": channel, "thread_ts": thread_ts, "text": text[:120], "at": time.time()}
        try:
            await self.meta.remember(recent_key(user), json.dumps(entry, ensure_ascii=False), keep=RECENT)
        except StoreError as exc:  # the question itself went through: only the Home tab misses it
            log.warning("recent question of %s not remembered: %s", user, exc)

    async def publish(self, user: str, notice: str = "") -> None:
        """``notice``: what a click on the tab itself came to, when it did not do what it asked (it has no
        channel to be told in), at the top."""
        blocks = await self.blocks(user)
        view = {"type": "home", "blocks": [blocks[0], kit.mrkdwn(f":information_source: {notice}"), *blocks[1:]]
                if notice else blocks}
        for attempt in range(1, PUBLISH_TRIES + 1):  # a refused click's only answer may be in it
            try:
                await self.client.views_publish(user_id=user, view=view)
                return
            except SLACK_FAILURES as exc:
                # the whole view each time: trying again is harmless — but not a 429 (the client waits those out
                # itself) nor a timeout (it may still land: an older view over a newer one)
                if attempt == PUBLISH_TRIES or rate_limited(exc) or not may_have_acted(exc) \
                        or isinstance(exc, TimeoutError):
                    log.warning("App Home for %s not published: %s", user, slack_error(exc))
                    return
                await asyncio.sleep(0.5 * attempt)

    async def language(self, user: str) -> str:
        """A Home tab speaks the configured language, else that of the person's latest question (English at first)."""
        configured = self.access.config.language
        if configured in ("en", "zh"):
            return configured
        for raw in await self.meta.recall(recent_key(user)):
            try:
                entry = json.loads(raw)
                thread = await self.meta.get(THREAD, thread_key(str(entry["channel"]), str(entry["thread_ts"])))
            except (ValueError, KeyError, TypeError):
                continue
            said = thread.get("lang") or signal(str(entry.get("text") or ""))  # "restart it" in a 中文 thread
            if said:  # a question that was only a link says nothing: the one before it may
                return str(said)
        return "en"

    async def blocks(self, user: str) -> list[kit.Block]:
        header: kit.Block = {"type": "header", "text": {"type": "plain_text", "text": "OpsPilot"}}
        lang = await self.language(user)
        if not (await self.access.may_use(user, "", direct=True)).allowed:  # who they are, wherever they ask
            return [header, kit.mrkdwn(await self._not_allowed(lang))]
        blocks: list[kit.Block] = [header, kit.context(say(lang, "home_intro"))]
        if self.no_model:
            blocks.insert(1, kit.mrkdwn(f"*{say(lang, 'no_model_key')}*"))
        blocks += [kit.mrkdwn(f"*{say(lang, 'waiting')}*"), *await self._waiting(user, lang)]
        blocks += [{"type": "divider"}, kit.mrkdwn(f"*{say(lang, 'home_recent')}*"), *await self._recent(user, lang)]
        if self.timers is not None:
            blocks += [{"type": "divider"}, kit.mrkdwn(f"*{say(lang, 'home_timers')}*"),
                       *await self.timers(user, lang)]
        blocks += [{"type": "divider"}, kit.mrkdwn(f"*{say(lang, 'home_changes')}*"), *await self._changes(user, lang)]
        blocks += [{"type": "divider"}, kit.mrkdwn(f"*{say(lang, 'home_latest_down')}*"),
                   kit.mrkdwn(await home_lines(self.reports, self.visibility, self.people, user, lang))]
        return blocks[:100]  # Slack's limit for a Home view

    async def _not_allowed(self, lang: str = "en") -> str:
        names = await self.access.who_may_use(self.people, lang)
        return " ".join([f":no_entry: {say(lang, 'home_not_allowed')}",
                         *([say(lang, "home_allowed_are", names=names)] if names else []), say(lang, "home_ask")])

    async def _waiting(self, user: str, lang: str) -> list[kit.Block]:
        lines = []
        for ticket in await self.engine.questions(expiring_before=time.time() + 10 * 365 * 86400):
            pending = ticket.pending
            env = pending.environment
            channel = channel_of(ticket.thread_id)
            if not await self.visibility.may_see(user, channel, person=ticket.requester or ""):
                continue
            if pending.interrupt_type == "confirm_risky":  # as a click is judged: where first, then who
                if not self.access.may_change_in(channel, direct=channel.startswith("D")).allowed or not (
                        await self.access.may_confirm(user, pending.call.name, env, ticket.requester)).allowed:
                    continue
                what = say(lang, "home_confirm")
            elif user != ticket.requester:
                continue  # a form is for the person who asked
            else:
                what = say(lang, "home_fill")
            target = "/".join(str(pending.arguments[k]) for k in ("service_id", "environment")
                              if pending.arguments.get(k))
            thread_ts = ticket.thread_id.rsplit(":", 1)[-1]
            lines.append(say(lang, "home_wait_line", what=what, tool=kit.bare(pending.call.name),
                             on=say(lang, "ran_on", target=kit.escape(target)) if target else "",
                             who=kit.who(ticket.requester or "?"), at=kit.hhmm(pending.expires_at),
                             link=thread_link(channel, thread_ts, say(lang, "home_open_thread"))))
        return [kit.mrkdwn("\n".join(lines[:20]) if lines else f"_{say(lang, 'home_nothing_waiting')}_")]

    async def _recent(self, user: str, lang: str) -> list[kit.Block]:
        lines = []
        for raw in await self.meta.recall(recent_key(user)):
            try:
                entry: dict[str, Any] = json.loads(raw)
            except ValueError:
                continue
            if not await self.visibility.may_see(user, str(entry.get("channel") or ""), person=user):
                continue  # they left that private channel: its question goes with it
            link = thread_link(entry["channel"], entry["thread_ts"], entry["text"] or say(lang, "home_no_text"))
            lines.append(f"• {kit.hhmm(float(entry['at']))} — {link}")
        return [kit.mrkdwn("\n".join(lines) if lines else f"_{say(lang, 'home_no_questions')}_")]

    async def _changes(self, user: str, lang: str) -> list[kit.Block]:
        lines = []
        read = await self.reports.read_audit(CHANGES_READ)  # read deeper: some are not this reader's
        for entry in read:
            if await self.visibility.may_see(user, channel_of(entry.get("thread_id") or ""),
                                             person=entry.get("requested_by") or ""):
                lines.append(audit_line(entry, lang))
            if len(lines) == 5:
                break
        if not lines and len(read) == CHANGES_READ:  # theirs may be older than what was read: not "none"
            return [kit.mrkdwn(f"_{say(lang, 'home_no_changes_read', n=CHANGES_READ)}_")]
        return [kit.mrkdwn("\n".join(lines) if lines else f"_{say(lang, 'home_no_changes')}_")]
