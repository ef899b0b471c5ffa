"""App Home: what OpsPilot has for the person who opens it — the questions waiting for them (cards they may
answer, with a link to the thread), their recent questions, and the last changes from the audit stream; for
someone who may not use OpsPilot, that they may not and whom to ask."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.engine import Engine
from bot.slack import blocks as kit
from bot.slack.access import AccessPolicy
from bot.slack.audit import audit_line
from bot.slack.meta import channel_of
from bot.slack.people import People
from bot.slack.words import say
from state.store import MetaStore, Reports

log = logging.getLogger(__name__)

RECENT = 5  # questions per person kept for the Home tab


def recent_key(user: str) -> str:
    return f"recent:{user}"


def thread_link(channel: str, thread_ts: str, label: str) -> str:
    return f"<https://slack.com/archives/{channel}/p{thread_ts.replace('.', '')}|{kit.escape(label)}>"


class Home:
    def __init__(self, *, client: AsyncWebClient, engine: Engine, meta: MetaStore, reports: Reports,
                 access: AccessPolicy, people: People | None = None) -> None:
        self.client = client
        self.people = people or People(client)
        self.engine = engine
        self.meta = meta
        self.reports = reports
        self.access = access

    async def asked(self, user: str, channel: str, thread_ts: str, text: str) -> None:
        """Remember a question for its asker's Home tab."""
        entry = {"channel": channel, "thread_ts": thread_ts, "text": text[:120], "at": time.time()}
        await self.meta.remember(recent_key(user), json.dumps(entry, ensure_ascii=False), keep=RECENT)

    async def publish(self, user: str) -> None:
        view = {"type": "home", "blocks": await self.blocks(user)}
        try:
            await self.client.views_publish(user_id=user, view=view)
        except SlackApiError as exc:
            log.warning("App Home for %s not published: %s", user, exc.response.get("error"))

    async def blocks(self, user: str) -> list[kit.Block]:
        header: kit.Block = {"type": "header", "text": {"type": "plain_text", "text": "OpsPilot"}}
        if not (await self.access.may_use(user, "", direct=True)).allowed:  # who they are, wherever they ask
            return [header, kit.mrkdwn(await self._not_allowed())]
        blocks: list[kit.Block] = [header,
                                   kit.context("Ask me in any channel I am in (mention @OpsPilot), in a DM, or "
                                               "with `/opspilot <question>`.")]
        blocks += [kit.mrkdwn("*Waiting for you*"), *await self._waiting(user)]
        blocks += [{"type": "divider"}, kit.mrkdwn("*Your recent questions*"), *await self._recent(user)]
        blocks += [{"type": "divider"}, kit.mrkdwn("*Recent changes*"), *await self._changes()]
        return blocks[:100]  # Slack's limit for a Home view

    async def _not_allowed(self, lang: str = "en") -> str:
        names = await self.access.who_may_use(self.people, lang)
        return " ".join([f":no_entry: {say(lang, 'home_not_allowed')}",
                         *([say(lang, "home_allowed_are", names=names)] if names else []), say(lang, "home_ask")])

    async def _waiting(self, user: str) -> list[kit.Block]:
        lines = []
        for ticket in await self.engine.questions(expiring_before=time.time() + 10 * 365 * 86400):
            pending = ticket.pending
            env = pending.arguments.get("environment")
            channel = channel_of(ticket.thread_id)
            if not channel or not (await self.access.may_use(user, channel)).allowed:
                continue
            if pending.interrupt_type == "confirm_risky":
                if not (await self.access.may_confirm(user, pending.call.name, env, ticket.requester)).allowed:
                    continue
                what = "confirm"
            elif user != ticket.requester:
                continue  # a form is for the person who asked
            else:
                what = "fill in"
            target = "/".join(str(pending.arguments[k]) for k in ("service_id", "environment")
                              if pending.arguments.get(k))
            thread_ts = ticket.thread_id.rsplit(":", 1)[-1]
            lines.append(f"• {what} `{kit.escape(pending.call.name)}`{f' on {kit.escape(target)}' if target else ''}"
                         f" — asked by {kit.who(ticket.requester or '?')}, expires {kit.hhmm(pending.expires_at)} — "
                         f"{thread_link(channel, thread_ts, 'open the thread')}")
        return [kit.mrkdwn("\n".join(lines[:20]) if lines else "_Nothing is waiting for you._")]

    async def _recent(self, user: str) -> list[kit.Block]:
        lines = []
        for raw in await self.meta.recall(recent_key(user)):
            try:
                entry: dict[str, Any] = json.loads(raw)
            except ValueError:
                continue
            lines.append(f"• {kit.hhmm(float(entry['at']))} — "
                         f"{thread_link(entry['channel'], entry['thread_ts'], entry['text'] or '(no text)')}")
        return [kit.mrkdwn("\n".join(lines) if lines else "_No questions yet._")]

    async def _changes(self) -> list[kit.Block]:
        lines = [audit_line(a, "en") for a in await self.reports.read_audit(5)]
        return [kit.mrkdwn("\n".join(lines) if lines else "_No changes recorded._")]
