"""Assembling and running the Slack service: ``opspilot serve``."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import aiohttp
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from bot.assembly import Assembly, assemble
from bot.config import ConfigError, Settings
from bot.slack.alerts.investigations import Alerts
from bot.slack.app import StoreFirst, build_bolt_app, readiness, web_routes
from bot.slack.catchup import CatchUp
from bot.slack.feedback.votes import Feedback
from bot.slack.followups.firing import TimerParts
from bot.slack.followups.firing import wire as wire_timers
from bot.slack.followups.reminders import Reminders
from bot.slack.home.tab import Home
from bot.slack.inbound.access import AccessPolicy
from bot.slack.inbound.background import FAILED
from bot.slack.inbound.gate import bolt_text
from bot.slack.inbound.identity import Identity
from bot.slack.inbound.offers import Offers
from bot.slack.inbound.run_gate import RunGate
from bot.slack.inbound.thread_reader import ThreadReader
from bot.slack.inbound.work import Executor
from bot.slack.inbound.work_items import Delivery, NotYet, WorkItem
from bot.slack.inbound.worker import Worker, attempts
from bot.slack.outbound.counters import Metrics, retry_handlers
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.pacer import Pacer
from bot.slack.outbound.people import People
from bot.slack.outbound.streams import Streams
from bot.slack.outbound.thread_meta import KnownThreads
from bot.slack.render import Renderer
from bot.slack.router import Inbound
from state import RedisStore, StoreError
from state.meta_store import DEDUPE_MARK
from state.pacing import RedisPacing
from state.queue import Lane
from state.store import WorkQueue

if TYPE_CHECKING:  # Bolt and Socket Mode are imported where they are used (see build_service)
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_bolt.async_app import AsyncApp
    from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient

    from bot.slack.inbound.link import SocketLink

log = logging.getLogger(__name__)

FRONT_TAKEOVER_S = 5.0
"""A front writes no message of its own (it stores requests; workers render): its scan takes only threads due this
long, which the workers that wrote them left (one died, or is far behind). Delivering the workers' messages as
they fall due took its event loop from Slack's acknowledgements: with 200 runs active, a front's ack p99 was
3.8–5.7× a bare Bolt app's, and 1.1× with no delivery at all (bench/ack_latency.py)."""


@dataclass
class SlackService:
    core: Assembly
    client: AsyncWebClient
    inbound: Inbound
    renderer: Renderer
    outbox: SlackOutbox
    reminders: Reminders
    bolt_app: Callable[[], AsyncApp]
    """The Bolt app, built on first use (a worker's, by the first request it reads)."""
    routes: list[web.RouteDef]
    metrics: Metrics
    role: Role = "all"
    worker: Worker | None = None
    sessions: tuple[aiohttp.ClientSession, ...] = ()
    """The Web API clients' HTTP sessions: connections are kept and reused (one TLS handshake, not one a call)."""
    link: SocketLink | None = None
    """Socket Mode: the connection to Slack (connected by whoever serves, see :mod:`bot.slack.serve`)."""
    timers: TimerParts | None = None
    """Follow-ups and scheduled checks (fired where runs happen)."""
    catchup: CatchUp | None = None
    """What a dead instance left undone: pauses and ends never shown, runs cut off mid-read (where runs happen)."""
    identity: Identity | None = None
    """Who the bot is (``auth.test``), as requests are authorised."""
    executor: Executor | None = None
    """What does the work items (a worker's, or this process's)."""

    @property
    def bolt(self) -> AsyncApp:
        return self.bolt_app()

    @property
    def web_app(self) -> web.Application:
        app = web.Application()
        app.router.add_routes(self.routes)
        return app

    def start(self) -> None:
        """The background duties: the outbox's delivery; where runs happen, the engine's sweeps, Slack's
        reminders and (in a worker) reading the queue."""
        if self.worker is not None:  # first: its first read is not queued behind the sweeps' first rounds
            self.worker.start()
        self.outbox.start()
        if self.role != "front":
            self.core.sweeps.start()
            self.reminders.start()
            if self.catchup is not None:
                self.catchup.start()
            if self.timers is not None:
                self.timers.firer.start()

    async def stop(self, timeout_s: float = 10.0) -> None:
        self.reminders.stop()
        if self.timers is not None:
            await self.timers.firer.stop()
        await self.core.sweeps.stop()
        if self.catchup is not None:
            await self.catchup.stop()
        if self.worker is not None:
            await self.worker.stop()
        await self.drain(timeout_s)
        await self.outbox.stop()
        await self.core.close_tools()
        await self.close_sessions()

    async def close_sessions(self) -> None:
        for session in self.sessions:
            await session.close()

    def busy(self) -> bool:
        return self.inbound.tasks.busy() or self.core.bus.busy() or bool(self.worker and self.worker.busy())

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for acknowledged work, for every engine event to be rendered, and for the outbox to deliver."""
        await self.inbound.tasks.drain(timeout_s)
        try:
            await asyncio.wait_for(self.core.bus.drain(), timeout_s)
        except TimeoutError:
            log.warning("some engine events were not rendered within %gs", timeout_s)
        await self.outbox.drain(timeout_s)


Role = Literal["all", "front", "worker"]


async def build_service(settings: Settings, *, socket_mode: bool = False, fallback_store: bool = False,
                        core: Assembly | None = None, role: Role = "all") -> SlackService:
    """Everything the Slack bot needs; ``core`` lets a caller bring its own engine (tests, the demo).

    ``all``: one process acknowledges and works. ``front``: acknowledges, checks and enqueues; never runs a
    turn. ``worker``: reads the queue, runs the engine, renders, delivers, sweeps."""
    slack = settings.slack
    if not slack.bot_token:
        raise ConfigError("SLACK_BOT_TOKEN is not set (the bot token, xoxb-…); see README.md, 'Install in your Slack'")
    if role != "worker" and not socket_mode and not slack.signing_secret:
        raise ConfigError("SLACK_SIGNING_SECRET is not set: HTTP mode verifies every request's signature")
    core = core or await assemble(settings, fallback_store=fallback_store, with_mcp=role != "front",
                                  with_model=role != "front", with_followups=True)
    metrics = Metrics()
    core.bus.listen(metrics.observe)
    api_url = slack.api_url if slack.api_url.endswith("/") else slack.api_url + "/"
    # Without a session of its own, slack-sdk opens a new one (a new connection, a new TLS handshake) per call.
    # A kept session takes its timeout from the session, not from the client.
    sessions = (aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)),
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=max(slack.request_timeout_s, 1))))
    client = AsyncWebClient(token=slack.bot_token, base_url=api_url, retry_handlers=retry_handlers(metrics),
                            session=sessions[0])
    # Deliveries retry on their own, after checking whether a post landed: this client retries nothing, not a
    # 5xx or a dropped connection (which may have landed), nor a 429 (the outbox comes back after Retry-After, and
    # a call must end within its timeout: it starts only while its thread's lease is sure, see outbound/hold.py).
    delivery = AsyncWebClient(token=slack.bot_token, base_url=api_url, timeout=int(max(slack.request_timeout_s, 1)),
                              retry_handlers=[], session=sessions[1])
    meta = KnownThreads(core.meta)  # every surface reads a thread's place and language: kept once known
    identity = Identity(client, meta)
    # Slack counts per workspace, whichever process calls: so do all ours, in Redis.
    shared = RedisPacing(core.store.client, core.store.keys) if isinstance(core.store, RedisStore) else None
    pacer = Pacer(posts_per_second=slack.posts_per_second, updates_per_minute=slack.updates_per_minute,
                  shared=shared, workspace=lambda: _team(identity))
    outbox = SlackOutbox(store=core.outbox, client=delivery, metrics=metrics, pacer=pacer,
                         update_interval_s=slack.progress_interval_s, max_backoff_s=slack.outbox_max_backoff_s,
                         streams=Streams(client=delivery, pacer=pacer, metrics=metrics, mode=slack.progress),
                         takeover_after_s=FRONT_TAKEOVER_S if role == "front" else 0.0)
    reader = ThreadReader(client, meta, max_messages=slack.thread_context_messages,
                          max_chars=slack.thread_context_chars) if slack.thread_context_messages else None
    # One cache of groups and names per process; the catalog's environments, so a rule that cannot match fails closed.
    access = AccessPolicy(slack, client, environments=core.toolbox.catalog.environments)
    executor = Executor(engine=core.engine, meta=meta, outbox=outbox, metrics=metrics, reader=reader,
                        language=slack.language, access=access)
    executor.offers = Offers(meta=meta, outbox=outbox)
    queue = core.queue
    worker = Worker(queue=queue, executor=executor, reclaim_after_s=settings.sweeps.stale_after_s) \
        if role == "worker" else None

    async def enqueue(item: WorkItem) -> None:
        # Stop is short and watched: the quick lane (state/queue.py). A decision stays in the work lane: it carries
        # on its run, which a short idle period would take from a worker that is only slow.
        await queue.put(item.model_dump_json(), lane="quick" if item.kind == "stop" else "work")

    async def here(item: WorkItem) -> None:
        inbound.tasks.spawn(attempts(executor, item), name=f"{item.kind}-{item.channel}")

    # A worker hands on what a stored request means through the queue too: durable before the request is read.
    dispatch = here if role == "all" else enqueue
    alerts = Alerts(config=slack, engine=core.engine, meta=meta, outbox=outbox, dispatch=dispatch,
                    services=core.toolbox.catalog.ids, environments=core.toolbox.catalog.environments) \
        if slack.alert_sources else None
    people = People(client)
    timers = wire_timers(core=core, settings=settings, outbox=outbox, access=access, dispatch=dispatch,
                         executor=executor)
    feedback = Feedback(client=client, engine=core.engine, meta=meta, reports=core.reports, outbox=outbox,
                        access=access, metrics=metrics, model_label=core.model.label)
    inbound = Inbound(engine=core.engine, meta=meta, outbox=outbox, access=access, people=people,
                      dispatch=dispatch, alerts=alerts, metrics=metrics, reports=core.reports, feedback=feedback,
                      home=Home(client=client, engine=core.engine, meta=meta, reports=core.reports,
                                access=access, people=people, no_model=core.model.scripted))
    inbound.timers = timers
    inbound.gate = inbound.incidents.gate = RunGate(meta=meta, limits=slack.limits, outbox=outbox,
                                                    metrics=metrics, reports=core.reports)
    if timers is not None:
        timers.slack.gate = timers.firer.gate = timers.schedules.gate = inbound.gate
    if alerts is not None:
        alerts.gate = inbound.gate
    if inbound.home is not None:
        inbound.incidents.person_language = inbound.home.language
    if timers is not None and inbound.incidents.handover is not None:
        inbound.incidents.handover.followups = timers.slack.handover_lines
    if timers is not None and inbound.home is not None:
        inbound.home.timers = timers.slack.home_blocks
        timers.slack.visibility = inbound.home.visibility  # one cache of who can read what per process
        timers.schedules.person_language = inbound.home.language
    renderer = Renderer(outbox=outbox, meta=meta, reports=core.reports, language=slack.language,
                        progress=slack.progress, access=access, people=people,
                        model_note=core.model.label if core.model.scripted else "")
    renderer.rechecks = timers.slack.recheck_minutes if timers is not None else 0
    renderer.rollbacks = "rollback_service" in core.engine.deps.registry
    executor.close_card = renderer.close_card  # a decision whose worker died before its card was closed
    if role != "front":  # runs happen where the engine works: the front only hands work on
        core.bus.subscribe_looking_ahead(renderer)  # a burst of progress shown once
        core.bus.subscribe(feedback)  # which model wrote each answer, for the ratings it gets
    reminders = Reminders(engine=core.engine, meta=meta, outbox=outbox, config=slack,
                          interval_s=settings.sweeps.interval_s)
    catchup = None
    if role != "front":
        renderer.shown = core.store.shown
        catchup = CatchUp(engine=core.engine, meta=meta, renderer=renderer, dispatch=dispatch,
                          interval_s=settings.sweeps.interval_s)
        core.sweeps.on_lost = catchup.lost
    # Socket Mode carries no signatures; Bolt still wants a secret string.
    secret = slack.signing_secret or "socket-mode"
    # A worker reads stored requests and serves no Slack traffic of its own: it starts reading the queue without
    # importing or building Bolt (~60 ms), and builds its apps for the first request that needs one.
    bolt = functools.cache(lambda: build_bolt_app(client=client, signing_secret=secret, inbound=inbound,
                                                  identity=identity))
    if role != "worker":  # a front's first request is acknowledged against Slack's 3 s: built now
        bolt()
    store_first = None
    if role == "front" and not socket_mode:
        store_first = _store_first(queue)  # acknowledged only once stored; a worker reads it
    if worker is not None:
        worker.deliveries = _reader(functools.cache(lambda: build_bolt_app(
            client=client, signing_secret=secret, inbound=inbound, identity=identity, stored=True)))
    link = _socket_link(client, str(slack.app_token), bolt, _store_first(queue) if role == "front" else None,
                        identity) if socket_mode and slack.app_token else None
    routes = web_routes(bolt=bolt, signing_secret=secret, store=core.store, outbox=outbox, queue=queue,
                        metrics=metrics, tools_health=core.mcp.health if core.mcp is not None else None,
                        ready=readiness(store=core.store, queue=queue, front=role == "front", worker=worker,
                                        link=link.problem if link is not None else None,
                                        identity=identity if role != "worker" else None),
                        identity=identity, store_first=store_first)
    return SlackService(core, client, inbound, renderer, outbox, reminders, bolt, routes, metrics, role, worker,
                        sessions, link, timers, catchup, identity, executor)


STORE_DEADLINE_S = 2.5
"""Slack waits 3 s for an acknowledgement: a request not stored by then is answered 503 (Slack delivers an
event again; a click's or a command's sender sees an error and can try again)."""


def _store_first(queue: WorkQueue) -> StoreFirst:
    async def store(raw: bytes, content_type: str) -> bool:
        item = Delivery(body=raw.decode("utf-8"), content_type=content_type, received_at=time.time())
        # A click, a form or a command (form-encoded; events are JSON) is what a person watches: the quick lane.
        lane: Lane = "quick" if content_type.startswith("application/x-www-form-urlencoded") else "work"
        try:
            async with asyncio.timeout(STORE_DEADLINE_S):  # not wait_for: no task of its own for every request
                await queue.put(item.model_dump_json(), lane=lane)
        except (TimeoutError, StoreError) as exc:
            log.warning("a Slack request was not acknowledged: it could not be stored in %gs (%s)",
                        STORE_DEADLINE_S, type(exc).__name__)
            return False
        return True

    return store


def _reader(bolt: Callable[[], AsyncApp]) -> Callable[[Delivery, str], Awaitable[None]]:
    """A worker reads a stored request as the front would have, its dedupe markers carrying the entry's id."""
    async def read(item: Delivery, entry_id: str) -> None:
        from slack_bolt.request.async_request import AsyncBoltRequest

        mark, failures = DEDUPE_MARK.set(f"stored:{entry_id}"), FAILED.set([])
        try:
            request = AsyncBoltRequest(body=bolt_text(item.body, item.content_type),
                                       headers={"content-type": [item.content_type]})
            response = await bolt().async_dispatch(request)
            failed = FAILED.get() or []
        finally:
            DEDUPE_MARK.reset(mark)
            FAILED.reset(failures)
        if failed:  # a bug or a dependency failing: tried again (its dedupe marks are this entry's), then set aside
            raise RuntimeError(f"the stored request's work failed: {failed[0]}")
        if response.status >= 500:  # e.g. the identity unknown while Slack is away: read it again later
            raise NotYet(f"stored request answered {response.status}: {response.body[:200]}")

    return read


def _socket_link(client: AsyncWebClient, app_token: str, bolt: Callable[[], AsyncApp], store: StoreFirst | None,
                 identity: Identity) -> SocketLink:
    """A front with workers stores each envelope before acknowledging it; a single process hands it to Bolt."""
    from bot.slack.inbound.link import SocketLink, store_first  # Socket Mode's SDK: only where it is used

    def socket() -> AsyncBaseSocketModeClient:
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
        from slack_sdk.socket_mode.aiohttp import SocketModeClient

        if store is None:
            return AsyncSocketModeHandler(bolt(), app_token, web_client=client).client
        bare = SocketModeClient(app_token, web_client=client, logger=logging.getLogger("opspilot.bolt"))
        bare.socket_mode_request_listeners.append(store_first(store, lambda: _known(identity)))
        return bare

    return SocketLink(client, app_token, socket)


async def _team(identity: Identity) -> str | None:
    return (await identity.get() or {}).get("team_id") or None


async def _known(identity: Identity) -> bool:
    return await identity.get() is not None


def socket_mode_handler(service: SlackService, app_token: str) -> AsyncSocketModeHandler:
    """Socket Mode over slack-sdk's aiohttp client; it asks ``apps.connections.open`` at the same API URL."""
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

    return AsyncSocketModeHandler(service.bolt, app_token, web_client=service.client)
