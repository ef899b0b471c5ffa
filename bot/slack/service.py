"""Assembling and running the Slack service: ``opspilot serve``."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.assembly import Assembly, assemble
from bot.config import ConfigError, Settings
from bot.slack.access import AccessPolicy
from bot.slack.app import build_bolt_app, web_routes
from bot.slack.metrics import Metrics, retry_handlers
from bot.slack.scheduler import Sweeper
from bot.slack.surface import SlackSurface

log = logging.getLogger(__name__)


@dataclass
class SlackService:
    core: Assembly
    client: AsyncWebClient
    surface: SlackSurface
    sweeper: Sweeper
    bolt: AsyncApp
    routes: list[web.RouteDef]
    metrics: Metrics

    @property
    def web_app(self) -> web.Application:
        app = web.Application()
        app.router.add_routes(self.routes)
        return app


async def build_service(settings: Settings, *, socket_mode: bool = False, fallback_store: bool = False,
                        core: Assembly | None = None) -> SlackService:
    """Everything the Slack bot needs; ``core`` lets a caller bring its own engine (tests, the demo)."""
    slack = settings.slack
    if not slack.bot_token:
        raise ConfigError("SLACK_BOT_TOKEN is not set (the bot token, xoxb-…); see README, 'Running in Slack'")
    if not socket_mode and not slack.signing_secret:
        raise ConfigError("SLACK_SIGNING_SECRET is not set: HTTP mode verifies every request's signature")
    core = core or await assemble(settings, fallback_store=fallback_store)
    metrics = Metrics()
    core.bus.subscribe(metrics.observe)
    api_url = slack.api_url if slack.api_url.endswith("/") else slack.api_url + "/"
    client = AsyncWebClient(token=slack.bot_token, base_url=api_url, retry_handlers=retry_handlers(metrics))
    surface = SlackSurface(engine=core.engine, store=core.store, client=client,
                           access=AccessPolicy(slack, client), config=slack, metrics=metrics,
                           model_label=core.model.label, scripted=core.model.scripted)
    core.bus.subscribe(surface)
    # Socket Mode carries no signatures; Bolt still wants a secret string.
    bolt = build_bolt_app(client=client, signing_secret=slack.signing_secret or "socket-mode", surface=surface)
    return SlackService(core, client, surface, Sweeper(engine=core.engine, store=core.store, surface=surface,
                                                       config=slack), bolt,
                        web_routes(bolt=bolt, store=core.store, metrics=metrics), metrics)


def socket_mode_handler(service: SlackService, app_token: str) -> AsyncSocketModeHandler:
    """Socket Mode over slack-sdk's aiohttp client; it asks ``apps.connections.open`` at the same API URL."""
    return AsyncSocketModeHandler(service.bolt, app_token, web_client=service.client)


async def serve(settings: Settings) -> int:
    socket_mode = bool(settings.slack.app_token)
    service = await build_service(settings, socket_mode=socket_mode)
    service.sweeper.start()
    runner = web.AppRunner(service.web_app)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", settings.slack.port).start()
    mode = "Socket Mode" if socket_mode else f"HTTP mode, POST http://0.0.0.0:{settings.slack.port}/slack/events"
    print(f"OpsPilot is serving Slack ({mode}); /healthz and /metrics on port {settings.slack.port}; "
          f"model: {service.core.model.label}", flush=True)
    try:
        if socket_mode:
            handler = socket_mode_handler(service, str(settings.slack.app_token))
            await handler.connect_async()  # type: ignore[no-untyped-call]
        await asyncio.Event().wait()
    finally:
        service.sweeper.stop()
        await service.surface.drain(10)
        await runner.cleanup()
        await service.core.store.close()
    return 0
