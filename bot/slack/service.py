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
from bot.slack.inbound import Inbound
from bot.slack.metrics import CountingRateLimitHandler, Metrics, retry_handlers
from bot.slack.outbox import SlackOutbox
from bot.slack.pacer import Pacer
from bot.slack.reminders import Reminders
from bot.slack.render import Renderer

log = logging.getLogger(__name__)


@dataclass
class SlackService:
    core: Assembly
    client: AsyncWebClient
    inbound: Inbound
    renderer: Renderer
    outbox: SlackOutbox
    reminders: Reminders
    bolt: AsyncApp
    routes: list[web.RouteDef]
    metrics: Metrics

    @property
    def web_app(self) -> web.Application:
        app = web.Application()
        app.router.add_routes(self.routes)
        return app

    def start(self) -> None:
        """The background duties: the outbox's delivery, the engine's sweeps and Slack's reminders."""
        self.outbox.start()
        self.core.sweeps.start()
        self.reminders.start()

    async def stop(self, timeout_s: float = 10.0) -> None:
        self.reminders.stop()
        await self.core.sweeps.stop()
        await self.drain(timeout_s)
        await self.outbox.stop()

    def busy(self) -> bool:
        return self.inbound.busy() or self.core.bus.busy()

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for acknowledged work, for every engine event to be rendered, and for the outbox to deliver."""
        await self.inbound.drain(timeout_s)
        try:
            await asyncio.wait_for(self.core.bus.drain(), timeout_s)
        except TimeoutError:
            log.warning("some engine events were not rendered within %gs", timeout_s)
        await self.outbox.drain(timeout_s)


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
    core.bus.listen(metrics.observe)
    api_url = slack.api_url if slack.api_url.endswith("/") else slack.api_url + "/"
    client = AsyncWebClient(token=slack.bot_token, base_url=api_url, retry_handlers=retry_handlers(metrics))
    # Deliveries retry on their own, after checking whether a post landed: this client retries 429s only
    # (Slack did not take those), never a 5xx or a dropped connection (which may have landed).
    delivery = AsyncWebClient(token=slack.bot_token, base_url=api_url, timeout=int(max(slack.request_timeout_s, 1)),
                              retry_handlers=[CountingRateLimitHandler(metrics)])
    outbox = SlackOutbox(store=core.outbox, client=delivery, metrics=metrics,
                         pacer=Pacer(posts_per_second=slack.posts_per_second,
                                     updates_per_minute=slack.updates_per_minute),
                         update_interval_s=slack.progress_interval_s, max_backoff_s=slack.outbox_max_backoff_s)
    inbound = Inbound(engine=core.engine, meta=core.meta, outbox=outbox, access=AccessPolicy(slack, client),
                      metrics=metrics)
    renderer = Renderer(outbox=outbox, meta=core.meta, reports=core.reports,
                        model_note=f"model: {core.model.label}" if core.model.scripted else "")
    core.bus.subscribe(renderer)
    reminders = Reminders(engine=core.engine, meta=core.meta, outbox=outbox, config=slack,
                          interval_s=settings.sweeps.interval_s)
    # Socket Mode carries no signatures; Bolt still wants a secret string.
    bolt = build_bolt_app(client=client, signing_secret=slack.signing_secret or "socket-mode", inbound=inbound)
    return SlackService(core, client, inbound, renderer, outbox, reminders, bolt,
                        web_routes(bolt=bolt, store=core.store, outbox=outbox, metrics=metrics), metrics)


def socket_mode_handler(service: SlackService, app_token: str) -> AsyncSocketModeHandler:
    """Socket Mode over slack-sdk's aiohttp client; it asks ``apps.connections.open`` at the same API URL."""
    return AsyncSocketModeHandler(service.bolt, app_token, web_client=service.client)


async def serve(settings: Settings) -> int:
    socket_mode = bool(settings.slack.app_token)
    service = await build_service(settings, socket_mode=socket_mode)
    service.start()
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
        await service.stop()
        await runner.cleanup()
        await service.core.store.close()
    return 0
