"""People by name: Slack user ids turned into display names (``users.info``, cached), for text the model reads
("@Alice, can you check…") and the terminal. In Slack itself the bot writes ``<@U…>``, which Slack renders as
the name for each reader."""

from __future__ import annotations

import asyncio
import logging
import re
import time

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbound.api_errors import SLACK_FAILURES

log = logging.getLogger(__name__)

_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|([^>]*))?>")
TTL_S = 3600.0
FAILED_TTL_S = 30.0
AT_ONCE = 8


class People:
    def __init__(self, client: AsyncWebClient, *, max_size: int = 5000, timeout_s: float = 2.0) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.max_size = max_size
        self._names: dict[str, tuple[str, float]] = {}
        self._groups: tuple[dict[str, str], float] = ({}, 0.0)
        self._asking = asyncio.Semaphore(AT_ONCE)

    async def name(self, user_id: str) -> str:
        """The person's display name (else real name, else the id: users.info failing is not an error)."""
        cached = self._names.get(user_id)
        if cached and cached[1] > time.monotonic():
            return cached[0]
        try:
            async with asyncio.timeout(self.timeout_s):  # a name is cosmetic: never hold a question for it
                user = (await self.client.users_info(user=user_id)).get("user") or {}
        except SLACK_FAILURES as exc:  # a dropped connection (aiohttp) too, not only OSError
            log.info("users.info %s failed (%s): shown as its id", user_id, type(exc).__name__)
            # kept a little: while Slack hangs, every question naming them must not wait for it again
            self._keep(user_id, user_id, FAILED_TTL_S)
            return user_id
        profile = user.get("profile") or {}
        name = str(profile.get("display_name") or profile.get("real_name") or user.get("real_name")
                   or user.get("name") or user_id)
        self._keep(user_id, name, TTL_S)
        return name

    def _keep(self, user_id: str, name: str, ttl_s: float) -> None:
        if len(self._names) >= self.max_size:
            self._names.clear()
        self._names[user_id] = (name, time.monotonic() + ttl_s)

    async def _bounded(self, user_id: str) -> str:
        async with self._asking:  # a message naming hundreds asks a few at a time (users.info is rate limited)
            return await self.name(user_id)

    async def group(self, group_id: str) -> str:
        """A user group's @handle (else its name, else the id). Written out, never ``<!subteam^…>``: that would
        notify the whole group wherever it is shown."""
        groups, until = self._groups
        if until <= time.monotonic():
            try:
                async with asyncio.timeout(self.timeout_s):  # one call reads every group: cached together
                    listed = (await self.client.usergroups_list()).get("usergroups") or []
                groups = {str(g.get("id")): f"@{g['handle']}" if g.get("handle") else str(g.get("name") or g.get("id"))
                          for g in listed}
                self._groups = (groups, time.monotonic() + TTL_S)
            except SLACK_FAILURES as exc:  # a dropped connection (aiohttp) too, not only OSError
                log.info("usergroups.list failed (%s): groups shown as their ids", type(exc).__name__)
        return groups.get(group_id, group_id)

    async def plain(self, text: str, *, me: str | None) -> str:
        """``text`` with the bot's own mention removed and everyone else's written as @name."""
        matches = list(_MENTION.finditer(text))
        wanted = sorted({m.group(1) for m in matches if m.group(1) != me and not m.group(2)})
        names = dict(zip(wanted, await asyncio.gather(*map(self._bounded, wanted)), strict=True))  # at once
        out, last = [], 0
        for match in matches:
            out.append(text[last:match.start()])
            user = match.group(1)
            if user != me:
                out.append("@" + (match.group(2) or names[user]))
            last = match.end()
        out.append(text[last:])
        return re.sub(r"[ \t]{2,}", " ", "".join(out)).strip()

    async def quoted(self, text: str, limit: int) -> str:
        """A stored question inside one of our lines (a list on Home, a handover): people as @name, never as the
        raw ``<@U…>`` an escaped mention would show (a question OpsPilot composed names who asked), at most
        ``limit`` characters, an ellipsis where it was cut. Still to be quoted (:func:`blocks.quoted`)."""
        words = " ".join((await self.plain(text, me=None)).split())
        return words if len(words) <= limit else words[:limit - 1].rstrip() + "…"
