"""The local Slack's incoming webhooks (a mixin of :class:`bot.demo.workspace.LocalSlack`): a URL an alerting tool
posts to becomes a bot message in its channel, and the app is sent the ``message`` event for it, as Slack does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from bot.demo.local_server import LocalServer


class WebhookMethods:
    team_id: str
    webhooks: dict[str, dict[str, str]]
    messages: dict[tuple[str, str], dict[str, Any]]
    deliver: Callable[[dict[str, Any]], Coroutine[Any, Any, Any]] | None
    """Where events go (the app's Events API endpoint, through a signing sender), for messages Slack itself
    makes: incoming webhooks."""
    _deliveries: set[asyncio.Task[Any]]
    server: LocalServer

    def _next_ts(self) -> str:
        raise NotImplementedError

    async def _announce(self, change: dict[str, Any]) -> None:
        raise NotImplementedError

    def add_webhook(self, channel: str, *, bot_id: str = "B0ALERTS", username: str = "Alertmanager",
                    base_url: str | None = None) -> str:
        """An incoming-webhook URL (as an alerting tool is configured with) that posts into ``channel``;
        ``base_url`` where these routes are served when not on this fake's own server (the demo)."""
        hook = f"{self.team_id}/{bot_id}/{len(self.webhooks) + 1:04d}"
        self.webhooks[hook] = {"channel": channel, "bot_id": bot_id, "username": username}
        return f"{base_url or self.server.url}/services/{hook}"

    async def _incoming(self, request: web.Request) -> web.Response:
        """An incoming-webhook POST becomes a bot message in its channel, and Slack sends the app the
        ``message`` event (``subtype: bot_message``, the webhook's ``bot_id``) as it does."""
        hook = self.webhooks.get(request.match_info["hook"])
        if hook is None:
            return web.Response(status=404, text="no_service")
        try:
            body = await request.json()
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        ts = self._next_ts()
        message = {"type": "message", "subtype": "bot_message", "ts": ts, "channel": hook["channel"],
                   "bot_id": hook["bot_id"], "username": body.get("username") or hook["username"],
                   "text": str(body.get("text") or ""), "attachments": body.get("attachments") or [],
                   "blocks": body.get("blocks") or [], "thread_ts": None, "edits": 0}
        self.messages[(hook["channel"], ts)] = message
        await self._announce({"type": "message", "message": message})
        if self.deliver is not None:  # Slack sends events after answering the webhook: so do we
            event = {k: v for k, v in message.items() if k not in ("thread_ts", "edits")}
            task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(self.deliver(event))
            self._deliveries.add(task)
            task.add_done_callback(self._deliveries.discard)
        return web.Response(text="ok")

    def webhook_routes(self) -> list[web.RouteDef]:
        return [web.post("/services/{hook:.+}", self._incoming)]
