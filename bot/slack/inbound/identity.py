"""Who the bot is (``auth.test``), known without a round trip to Slack per request: cached in this process and
in Redis (so a process started during a Slack outage knows it too), refreshed in the background.

Bolt would otherwise ask ``auth.test`` itself and, when Slack answers 5xx, acknowledge the event with 200
("Failed to authorize") and drop it — Slack never redelivers what was acknowledged. When the identity cannot
be had at all, the front answers 503 instead, and Slack delivers the event again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.outbound.api_errors import SLACK_FAILURES, TOKEN_REFUSED, TokenRefused, slack_error
from state import StoreError
from state.store import MetaStore

if TYPE_CHECKING:  # Bolt is imported where a request is read: a worker starts reading the queue without it
    from slack_bolt.authorization import AuthorizeResult

log = logging.getLogger(__name__)

KIND = "identity"
FIELDS = ("team_id", "enterprise_id", "user_id", "bot_id", "url", "team")


class IdentityUnknown(Exception):
    """auth.test cannot be had and nothing is cached."""


class Identity:
    def __init__(self, client: AsyncWebClient, meta: MetaStore, *, refresh_s: float = 600.0,
                 timeout_s: float = 2.0) -> None:
        self.client, self.meta = client, meta
        self.refresh_s, self.timeout_s = refresh_s, timeout_s
        self._fields: dict[str, str] | None = None
        self._fetched = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self.refusal: str | None = None
        """Slack's error when it refused the token for good (``invalid_auth``…): a configuration to fix."""
        # One cache entry per token: a rotated token is another identity.
        self._name = hashlib.sha256((client.token or "").encode()).hexdigest()[:16]

    async def get(self) -> dict[str, str] | None:
        """The identity, or None when it is known nowhere and Slack will not say (the caller answers 503)."""
        if self._fields is None:
            await self._from_redis()
        if self._fields is None:
            await self._ask_slack()
        elif time.monotonic() - self._fetched > self.refresh_s and self._refreshing is None:
            self._refreshing = asyncio.create_task(self._refresh(), name="identity-refresh")
        return self._fields

    async def _from_redis(self) -> None:
        try:
            cached = await self.meta.get(KIND, self._name)
        except StoreError as exc:
            log.warning("the bot's identity could not be read from Redis: %s", exc)
            return
        if cached.get("team_id"):
            self._fields = cached
            self._fetched = 0.0  # known, but from an earlier process: confirmed with Slack in the background

    async def _ask_slack(self, quiet: bool = False) -> bool:
        try:
            async with asyncio.timeout(self.timeout_s):
                answer = await self.client.auth_test()
        except SLACK_FAILURES as exc:  # a dropped connection (aiohttp) too, not only OSError
            self.refusal = error if (error := slack_error(exc)) in TOKEN_REFUSED else None
            if quiet:
                return False
            log.warning("auth.test failed (%s): the bot's identity is %s", type(exc).__name__,
                        "kept from before" if self._fields else "unknown, requests are refused with 503")
            return False
        self.refusal = None
        data: dict[str, Any] = dict(answer.data) if isinstance(answer.data, dict) else {}
        self._fields = {k: str(data.get(k) or "") for k in FIELDS}
        self._fetched = time.monotonic()
        try:
            await self.meta.put(KIND, self._name, self._fields)
        except StoreError as exc:  # known here; the next process asks Slack itself
            log.warning("the bot's identity could not be cached in Redis: %s", exc)
        return True

    async def confirm(self) -> None:
        """At a front's start: Slack's own word on the bot token, whatever is cached. :class:`TokenRefused` when
        Slack refuses it for good; Slack away or failing is no reason not to start (requests wait on 503)."""
        # Quiet: Slack out of reach as it starts is said by what waits for it (Socket Mode's tries, a 503).
        if not await self._ask_slack(quiet=True) and self.refusal is not None:
            raise TokenRefused(f"Slack refused SLACK_BOT_TOKEN ({self.refusal}): copy the Bot User OAuth Token "
                               "(xoxb-…) from the app's OAuth & Permissions page")

    async def _refresh(self) -> None:
        try:
            await self._ask_slack()
        finally:
            self._refreshing = None

    def authorize(self) -> Callable[..., Awaitable[AuthorizeResult]]:
        """Bolt's ``authorize`` (a plain function: Bolt injects arguments by parameter name)."""
        async def authorize(enterprise_id: str | None, team_id: str | None) -> AuthorizeResult:
            return await self._result()

        return authorize

    async def _result(self) -> AuthorizeResult:
        """The cached identity, never a call to Slack on the request's path. Unknown: an error, so the request
        is not acknowledged (HTTP answers 503 before this; Socket Mode leaves it unacknowledged)."""
        from slack_bolt.authorization import AuthorizeResult

        fields = await self.get()
        if fields is None:
            raise IdentityUnknown("the bot's identity is not known (auth.test is failing)")
        return AuthorizeResult(enterprise_id=fields.get("enterprise_id") or None, team_id=fields.get("team_id"),
                               team=fields.get("team") or None, url=fields.get("url") or None,
                               # auth.test with a bot token: user_id is the bot's own user (as Bolt reads it)
                               bot_user_id=fields.get("user_id") or None, bot_id=fields.get("bot_id") or None,
                               bot_token=self.client.token)

    async def close(self) -> None:
        if self._refreshing is not None:
            self._refreshing.cancel()
