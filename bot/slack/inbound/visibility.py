"""Who may see what OpsPilot lists about a conversation: the people who can read it in Slack.

One rule for every list that shows items from many conversations (App Home's cards, questions, follow-ups,
schedules, changes and 👎 notes; the handover; summaries; ``opspilot stats``):

- a **public channel**'s items: anyone allowed to use OpsPilot there, but a guest (``is_restricted``,
  ``is_ultra_restricted``: they read only the channels they were invited to) only where they are a member;
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
        self._guests: dict[str, tuple[float, bool]] = {}
        self._joined: dict[str, tuple[float, frozenset[str] | None]] = {}  # public channels' members, for guests
        self._team_id: str | None = None

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
        guest = await self._guest(user)
        return guest is False or (guest is True and user in (await self._public_members(channel) or ()))

    async def _guest(self, user: str) -> bool | None:
        """Whether ``user`` is a guest account; None when Slack cannot say (left out: never shown on a guess)."""
        cached = self._guests.get(user)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        try:
            info: Any = await retried("users.info", lambda: self.client.users_info(user=user), attempts=2)
            about = info.get("user") or {}
            theirs, ours = str(about.get("team_id") or ""), await self._team() if about.get("team_id") else ""
            if ours is None:
                return None  # whether the account is this workspace's is not known: left out
            # Another organisation's account (Slack Connect) reads only what it is a member of, as a guest does.
            guest = bool(about.get("is_restricted") or about.get("is_ultra_restricted") or about.get("is_stranger")
                         or (theirs and theirs != ours))
        except _UNKNOWN as exc:
            if "user_not_found" not in slack_error(exc):
                log.warning("whether %s is a guest is not known (%s): public items are left out", user,
                            slack_error(exc))
                return None
            guest = True  # no account of this workspace (another organisation's): only what it is a member of
        if len(self._guests) >= self.max_size:
            self._guests.clear()
        self._guests[user] = (time.monotonic() + self.ttl_s, guest)
        return guest

    async def _team(self) -> str | None:
        """This workspace's team id (auth.test, once); None while Slack does not say."""
        if self._team_id is None:
            try:
                answer: Any = await retried("auth.test", self.client.auth_test, attempts=2)
            except _UNKNOWN as exc:
                log.warning("this workspace's team is not known (%s): other accounts' items are left out",
                            slack_error(exc))
                return None
            self._team_id = str(answer.get("team_id") or "")
        return self._team_id

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
