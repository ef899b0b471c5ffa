"""The Socket Mode link to Slack: connected with a growing wait while Slack cannot be reached, one log line per
failed try (slack-sdk's own loop logs a full traceback every few seconds), a refused app token said once and
fatal, and the link's state for ``/readyz``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

FIRST_WAIT_S, LONGEST_WAIT_S = 1.0, 60.0
REFUSED = frozenset({"invalid_auth", "not_authed", "not_allowed_token_type", "token_revoked", "account_inactive",
                     "token_expired", "missing_scope"})
"""apps.connections.open errors that trying again will not cure: the app-level token is wrong."""


class TokenRefused(Exception):
    """Slack refused the app-level token: Socket Mode cannot work until the configuration changes."""


class SocketLink:
    def __init__(self, client: AsyncWebClient, app_token: str,
                 handler: Callable[[], AsyncSocketModeHandler]) -> None:
        self.client, self.app_token, self._make = client, app_token, handler
        self.handler: AsyncSocketModeHandler | None = None
        self.tries = 0

    async def connect(self, stopping: asyncio.Event) -> bool:
        """Until connected (True) or stopping (False); :class:`TokenRefused` when the token is wrong."""
        wait = FIRST_WAIT_S
        while not stopping.is_set():
            self.tries += 1
            try:  # the cheap question first: can Slack be reached, and does it take the token?
                await self.client.apps_connections_open(app_token=self.app_token)
                handler = self._make()
                await handler.connect_async()  # type: ignore[no-untyped-call]
            except SlackApiError as exc:
                error = str(exc.response.get("error", "")) if exc.response is not None else ""
                if error in REFUSED:
                    raise TokenRefused(f"Slack refused SLACK_APP_TOKEN ({error}): it must be an app-level token "
                                       "(xapp-…) with connections:write, from the app's Basic Information "
                                       "page") from exc
                log.warning("Socket Mode: Slack answered %s; trying again in %gs",
                            error or getattr(exc.response, "status_code", "an error"), wait)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.warning("Socket Mode: cannot reach Slack at %s (%s); trying again in %gs",
                            self.client.base_url, _short(exc), wait)
            else:
                self.handler = handler
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), wait)
            wait = min(wait * 2, LONGEST_WAIT_S)
        return False

    async def problem(self) -> str | None:
        """Why events cannot arrive right now (for ``/readyz``), or None."""
        if self.handler is None:
            return f"not connected to Slack yet (Socket Mode, {self.tries} tries)"
        if not await self.handler.client.is_connected():
            return "the Socket Mode connection to Slack is down; reconnecting"
        return None

    async def close(self) -> None:
        if self.handler is not None:
            await self.handler.close_async()  # type: ignore[no-untyped-call]


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:159] + "…"


class OneLine(logging.Filter):
    """slack-sdk's reconnect loop logs every failed try with its traceback: keep the line, drop the traceback
    (the cause is in the line; a flood of tracebacks hides what else is logged)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.getMessage().startswith("Failed to connect"):
            record.exc_info, record.exc_text = None, None
        return True
