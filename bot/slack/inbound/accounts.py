"""Whose account a Slack user is: this workspace's own member, or an outsider — a guest (``is_restricted``,
``is_ultra_restricted``: invited to a few channels) or another organisation's account (Slack Connect: its
``team_id`` is not ours nor one of our Enterprise Grid organisation's, or ``users.info`` does not know it).
Asked of ``users.info`` and cached per process."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbound.api_errors import SLACK_FAILURES, retried, slack_error

log = logging.getLogger(__name__)

TTL_S = 60.0
FAILED_S = 15.0  # not known (Slack failing): asked again after this long
MAX_SIZE = 5000


class Accounts:
    def __init__(self, client: AsyncWebClient, *, ttl_s: float = TTL_S, max_size: int = MAX_SIZE) -> None:
        self.client, self.ttl_s, self.max_size = client, ttl_s, max_size
        self._outsiders: dict[str, tuple[float, bool | None]] = {}
        self._ours: tuple[str, str] | None = None

    async def outsider(self, user: str, *, within_s: float | None = None) -> bool | None:
        """Whether ``user`` is a guest or another organisation's account; None when Slack cannot say now (or not
        ``within_s``: kept a few seconds, so that a hanging Slack is not waited for on every question)."""
        cached = self._outsiders.get(user)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        try:
            async with asyncio.timeout(within_s):
                return await self._ask(user)
        except TimeoutError:
            log.warning("whether %s is a guest or another organisation's account is not known: Slack is slow", user)
            self._keep(user, None, FAILED_S)
            return None

    async def _ask(self, user: str) -> bool | None:
        try:
            info: Any = await retried("users.info", lambda: self.client.users_info(user=user), attempts=2)
            about = info.get("user") or {}
            theirs = str(about.get("team_id") or "")
            ours = await self._org() if theirs else ("", "")
            if ours is None:
                return None  # whether the account is this workspace's is not known
            # On Enterprise Grid a member of a sibling workspace of the same organisation is one of ours
            grid = str((about.get("enterprise_user") or {}).get("enterprise_id") or "")
            foreign = bool(theirs) and theirs != ours[0] and not (ours[1] and grid == ours[1])
            outsider = bool(about.get("is_restricted") or about.get("is_ultra_restricted")
                            or about.get("is_stranger") or foreign)
        except SLACK_FAILURES as exc:
            if "user_not_found" not in slack_error(exc):
                log.warning("whether %s is a guest or another organisation's account is not known (%s)", user,
                            slack_error(exc))
                self._keep(user, None, FAILED_S)
                return None
            outsider = True  # no account of this workspace: another organisation's
        self._keep(user, outsider, self.ttl_s)
        return outsider

    def _keep(self, user: str, outsider: bool | None, ttl_s: float) -> None:
        if len(self._outsiders) >= self.max_size:
            self._outsiders.clear()
        self._outsiders[user] = (time.monotonic() + ttl_s, outsider)

    async def _org(self) -> tuple[str, str] | None:
        """This workspace's team id and its Enterprise Grid organisation's ("" when none): auth.test, once; None
        while Slack does not say."""
        if self._ours is None:
            try:
                answer: Any = await retried("auth.test", self.client.auth_test, attempts=2)
            except SLACK_FAILURES as exc:
                log.warning("this workspace's team is not known (%s)", slack_error(exc))
                return None
            self._ours = str(answer.get("team_id") or ""), str(answer.get("enterprise_id") or "")
        return self._ours
