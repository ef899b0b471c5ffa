"""The Socket Mode link to Slack: connected with a growing wait while Slack cannot be reached, one log line per
failed try (slack-sdk's own loop logs a full traceback every few seconds), a refused app token said once and
fatal, and the link's state for ``/readyz``.

A front with workers acknowledges an envelope only once it is stored (:func:`store_first`), as in HTTP mode:
an envelope not acknowledged is sent again by Slack, one acknowledged and then lost would not be."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.inbound import shapes
from bot.slack.outbound.api_errors import TOKEN_REFUSED, TokenRefused, slack_error

log = logging.getLogger(__name__)

FIRST_WAIT_S, LONGEST_WAIT_S = 1.0, 60.0


class SocketLink:
    def __init__(self, client: AsyncWebClient, app_token: str,
                 socket: Callable[[], AsyncBaseSocketModeClient]) -> None:
        self.client, self.app_token, self._make = client, app_token, socket
        self.socket: AsyncBaseSocketModeClient | None = None
        self.tries = 0

    async def confirm(self) -> None:
        """The app token, asked once before OpsPilot says it serves: one Slack refuses is :class:`TokenRefused`
        (serve said "serving" and then stopped on it); no answer is left to :meth:`connect`, which waits."""
        try:
            await self.client.apps_connections_open(app_token=self.app_token)
        except SlackApiError as exc:
            if slack_error(exc) in TOKEN_REFUSED:
                raise _refused(slack_error(exc)) from exc
        except (aiohttp.ClientError, OSError, TimeoutError):
            pass

    async def connect(self, stopping: asyncio.Event) -> bool:
        """Until connected (True) or stopping (False); :class:`TokenRefused` when the token is wrong."""
        wait = FIRST_WAIT_S
        while not stopping.is_set():
            self.tries += 1
            try:  # the cheap question first: can Slack be reached, and does it take the token?
                await self.client.apps_connections_open(app_token=self.app_token)
                socket = self._make()
                await socket.connect()  # type: ignore[no-untyped-call]
            except SlackApiError as exc:
                error = slack_error(exc)
                if error in TOKEN_REFUSED:
                    raise _refused(error) from exc
                log.warning("Socket Mode: Slack answered %s; trying again in %gs",
                            error or getattr(exc.response, "status_code", "an error"), wait)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.warning("Socket Mode: cannot reach Slack at %s (%s); trying again in %gs",
                            self.client.base_url, _short(exc), wait)
            else:
                self.socket = socket
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), wait)
            wait = min(wait * 2, LONGEST_WAIT_S)
        return False

    async def problem(self) -> str | None:
        """Why events cannot arrive right now (for ``/readyz``), or None."""
        if self.socket is None:
            return f"not connected to Slack yet (Socket Mode, {self.tries} tries)"
        if not await self.socket.is_connected():
            return "the Socket Mode connection to Slack is down; reconnecting"
        return None

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close()  # type: ignore[no-untyped-call]


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


Listener = Callable[[AsyncBaseSocketModeClient, SocketModeRequest], Awaitable[None]]


def as_http(kind: str, payload: dict[str, Any]) -> tuple[str, str]:
    """An envelope's payload as the HTTP body Slack would have sent (body, content type), so a worker reads a
    stored Socket Mode request exactly as a stored HTTP one."""
    if kind == "events_api":
        return json.dumps(payload), "application/json"
    if kind == "interactive":
        return urlencode({"payload": json.dumps(payload)}), "application/x-www-form-urlencoded"
    return urlencode({k: str(v) for k, v in payload.items()}), "application/x-www-form-urlencoded"


def store_first(store: Callable[[bytes, str], Awaitable[bool]], known: Callable[[], Awaitable[bool]]) -> Listener:
    """Acknowledge an envelope only once it is stored; not at all while it cannot be (Slack sends it again)."""
    async def listen(socket: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        if req.type not in ("events_api", "interactive", "slash_commands") or not isinstance(req.payload, dict):
            return
        try:
            shapes.check(req.payload)
        except ValueError as exc:  # never readable: acknowledged, so it is not sent again forever
            log.warning("a malformed Socket Mode %s envelope was dropped: %s", req.type,
                        " ".join(str(exc).split())[:200])
            await socket.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        if not await known():
            log.warning("a Socket Mode envelope was not acknowledged: the bot's identity is not known yet")
            return
        body, content_type = as_http(req.type, req.payload)
        if await store(body.encode("utf-8"), content_type):
            await socket.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    return listen


def _refused(error: str) -> TokenRefused:
    return TokenRefused(f"Slack refused SLACK_APP_TOKEN ({error}): it must be an app-level token (xapp-…) with "
                        "connections:write, from the app's Basic Information page")
