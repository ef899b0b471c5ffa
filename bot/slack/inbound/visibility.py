"""Who may see what OpsPilot lists about a conversation: the people who can read it in Slack.

One rule for every list that shows items from many conversations (App Home's cards, questions, follow-ups,
schedules, changes and 👎 notes; the handover; summaries; ``opspilot stats``):

- a **public channel**'s items: anyone allowed to use OpsPilot there, but a guest or another organisation's account
  (``bot.slack.inbound.accounts``: they read only the channels they were invited to; named in
  ``slack.allowed_users`` or let in by ``slack.allow_outsiders``) only where they are a member;
- a **private channel**'s items: its members only (``conversations.members``, every page);
- a **direct message**'s items: its one person — the one the item records (who asked, rated, set it up), since
  OpsPilot's DMs have one person in them; no ``im:read`` scope needed;
- **unknown** (Slack failing, the bot not in it, a kind we cannot read): left out. Never shown on a guess.

What Slack says is cached per process for ``ttl_s`` (60 s: someone removed from a channel stops seeing its items
within a minute); a failed lookup is cached for a few seconds only, so one Home view does not ask again per item.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.inbound.access import AccessPolicy
from bot.slack.inbound.accounts import Accounts
from bot.slack.outbound.api_errors import SLACK_FAILURES, retried, slack_error

log = logging.getLogger(__name__)

TTL_S = 60.0
FAILED_S = 5.0
PAGE = 200  # Slack recommends no more than 200 members a page
MAX_PAGES = 50  # 10,000 members: past that the channel is treated as unreadable (left out), not half-read
_UNKNOWN: tuple[type[BaseException], ...] = (*SLACK_FAILURES, LookupError)


@dataclass(frozen=True)
class Conversation:
    kind: Literal["public", "private", "dm"]
    members: frozenset[str] = frozenset()
    """A private channel's members (empty for public channels and DMs)."""


def is_dm(channel: str) -> bool:
    return channel.startswith("D")


class Visibility:
    def __init__(self, client: AsyncWebClient, access: AccessPolicy | None = None, *, ttl_s: float = TTL_S,
                 max_size: int = 5000) -> None:
        self.client, self.access, self.ttl_s, self.max_size = client, access, ttl_s, max_size
        self._cache: dict[str, tuple[float, Conversation | None]] = {}
        self.accounts = access.accounts if access is not None else Accounts(client, ttl_s=ttl_s)
        self._joined: dict[str, tuple[float, frozenset[str] | None]] = {}  # public channels' members, for guests

    async def conversation(self, channel: str) -> Conversation | None:
        """What Slack says the conversation is (and a private one's members); None when it cannot be told."""
        if is_dm(channel):
            return Conversation("dm")
        cached = self._cache.get(channel)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        found = await self._lookup(channel)
        if len(self._cache) >= self.max_size:
            self._cache.clear()
        self._cache[channel] = (time.monotonic() + (self.ttl_s if found else min(FAILED_S, self.ttl_s)), found)
        return found

    async def readable(self, user: str, channel: str, *, person: str = "") -> bool:
        """Whether ``user`` can read ``channel`` in Slack; ``person``: whom the item records (a DM's person)."""
        if not channel or not user:
            return False
        found = await self.conversation(channel)
        if found is None:
            return False
        if found.kind == "dm":
            return bool(person) and user == person
        if found.kind == "private":
            return user in found.members
        guest = await self.accounts.outsider(user)
        return guest is False or (guest is True and user in (await self._public_members(channel) or ()))

    async def _public_members(self, channel: str) -> frozenset[str] | None:
        cached = self._joined.get(channel)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        try:
            members: frozenset[str] | None = await self._members(channel)
        except _UNKNOWN as exc:
            log.warning("who is in %s is not known (%s): a guest sees none of its items", channel, slack_error(exc))
            members = None
        if len(self._joined) >= self.max_size:
            self._joined.clear()
        self._joined[channel] = (time.monotonic() + (self.ttl_s if members is not None else FAILED_S), members)
        return members

    async def may_see(self, user: str, channel: str, *, person: str = "") -> bool:
        """:meth:`readable`, and ``user`` may use OpsPilot there (the config's allow-lists)."""
        if self.access is not None and not (await self.access.may_use(user, channel, direct=is_dm(channel))).allowed:
            return False
        return await self.readable(user, channel, person=person)

    async def public(self, channel: str) -> bool:
        """Whether anyone in the workspace can read ``channel`` (what a terminal, with no reader, may show)."""
        found = await self.conversation(channel) if channel else None
        return found is not None and found.kind == "public"

    async def _lookup(self, channel: str) -> Conversation | None:
        try:
            info: Any = await retried("conversations.info", lambda: self.client.conversations_info(channel=channel),
                                      attempts=2)
            about = info.get("channel") or {}
            if about.get("is_im"):
                return Conversation("dm")
            if not (about.get("is_private") or about.get("is_group") or about.get("is_mpim")):
                return Conversation("public")
            return Conversation("private", await self._members(channel))
        except _UNKNOWN as exc:
            log.warning("who can read %s is not known (%s): its items are left out", channel, slack_error(exc))
            return None

    async def _members(self, channel: str) -> frozenset[str]:
        members: set[str] = set()
        cursor = ""
        for _ in range(MAX_PAGES):
            page: Any = await retried("conversations.members", _page(self.client, channel, cursor), attempts=2)
            members.update(str(m) for m in page.get("members") or [])
            cursor = str((page.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                return frozenset(members)
        raise LookupError(f"more than {MAX_PAGES * PAGE} members")


def _page(client: AsyncWebClient, channel: str, cursor: str) -> Any:
    """One page's call, bound to its cursor (a lambda in the loop would read the loop's latest)."""
    async def call() -> Any:
        return await client.conversations_members(channel=channel, limit=PAGE, cursor=cursor or None)
    return call
