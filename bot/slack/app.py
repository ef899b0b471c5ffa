"""The Bolt app and the HTTP server around it: ``POST /slack/events``, ``GET /healthz`` (alive),
``GET /readyz`` (able to do its part), ``GET /metrics``.

Every request passes :mod:`bot.slack.inbound.gate` first (signature on the raw bytes, a well-formed body, the
installed workspace); then Bolt acknowledges events by itself and actions/commands through ``ack()`` —
always before any work, which runs in the background.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.feedback.votes import VIEW_ID as FEEDBACK_FORM
from bot.slack.inbound.gate import bolt_text, foreign, refusal
from bot.slack.inbound.identity import Identity
from bot.slack.inbound.link import OneLine
from bot.slack.inbound.worker import READ_WINDOW_S, Worker
from bot.slack.incidents.commands import SHORTCUT as SUMMARIZE_SHORTCUT
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.router import Inbound
from core.text import mend
from state import StoreError
from state.store import Store, WorkQueue

if TYPE_CHECKING:  # Bolt (~50 ms to import) is loaded where an app is built: a worker builds its own only
    # for the first stored request it reads, and starts reading the queue without it
    from slack_bolt.async_app import AsyncAck, AsyncApp
    from slack_bolt.context.async_context import AsyncBoltContext
    from slack_bolt.response import BoltResponse

log = logging.getLogger(__name__)


class _NotAboutTokens(logging.Filter):
    """Bolt warns at every start that SLACK_BOT_TOKEN "will be ignored/unused": true and expected (the token is
    the client's, the identity comes from :mod:`bot.slack.inbound.identity`), and noise that hides real warnings."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("`token`" in message and ("will be ignored" in message or "will be unused" in message))


_BOLT_LOG = logging.getLogger("opspilot.bolt")
_BOLT_LOG.addFilter(_NotAboutTokens())
_BOLT_LOG.addFilter(OneLine())


def build_bolt_app(*, client: AsyncWebClient, signing_secret: str, inbound: Inbound,
                   identity: Identity | None = None, stored: bool = False) -> AsyncApp:
    """``stored``: the app that reads requests a front stored before acknowledging them (their signature was
    checked then): each listener finishes its work before the request counts as read."""
    from slack_bolt.async_app import AsyncApp
    from slack_bolt.response import BoltResponse

    # With an identity, Bolt authorizes from its cache instead of asking auth.test on a request's path.
    # The gate verified every HTTP request on its raw bytes before Bolt sees it (Bolt gets a body it can parse,
    # see gate.bolt_text); Socket Mode has no signatures.
    # A name of its own: without one Bolt names the app after its caller's file through inspect.stack(), which
    # reads the source of every frame on the stack (~40 ms a build, twice in a worker's start).
    app = AsyncApp(name="opspilot", client=client, signing_secret=signing_secret, process_before_response=stored,
                   request_verification_enabled=False, logger=_BOLT_LOG,
                   authorize=identity.authorize() if identity else None)

    async def handle(work: Coroutine[Any, Any, None], name: str) -> None:
        if stored:
            await inbound.tasks.now(work, name)
        else:
            inbound.tasks.spawn(work, name)

    @app.middleware
    async def installed_workspace_only(context: AsyncBoltContext, body: dict[str, Any],
                                       next: Callable[[], Awaitable[None]]) -> BoltResponse | None:
        elsewhere = foreign(context, body)
        if elsewhere is not None:  # acknowledged (so Slack does not retry it) and otherwise ignored
            log.warning("ignored a request from %s", elsewhere)
            return BoltResponse(status=200, body="")
        mend(body)  # half an emoji ("\ud83d" from a client that cut one) could be neither stored nor sent
        await next()
        return None

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], body: dict[str, Any], context: dict[str, Any]) -> None:
        await handle(inbound.on_message(event, body.get("event_id"), mentioned=True,
                                        bot_user_id=context.get("bot_user_id")), "mention")

    @app.event("message")
    async def on_message(event: dict[str, Any], body: dict[str, Any], context: dict[str, Any]) -> None:
        await handle(inbound.on_message(event, body.get("event_id"), mentioned=False,
                                        bot_user_id=context.get("bot_user_id")), "message")

    @app.command("/opspilot")
    async def on_command(ack: AsyncAck, command: dict[str, Any]) -> None:
        await ack()
        await handle(inbound.on_command(command), "command")

    @app.action(re.compile(r"^opspilot_"))
    async def on_action(ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        await handle(inbound.on_action(body, action), f"action-{action.get('action_id')}")

    @app.shortcut("opspilot_investigate_message")
    async def on_shortcut(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        await handle(inbound.on_shortcut(body), "shortcut")

    @app.shortcut(SUMMARIZE_SHORTCUT)
    async def on_summarize(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        await handle(inbound.incidents.on_shortcut(body), "summarize")

    @app.view(FEEDBACK_FORM)
    async def on_feedback_form(ack: AsyncAck, body: dict[str, Any]) -> None:
        if inbound.feedback is None:
            await ack()
            return
        submission, errors = await inbound.feedback.read(body)  # a refusal is shown in the form itself
        await (ack(response_action="errors", errors=errors) if errors else ack())
        if submission is not None:
            await handle(inbound.feedback.submitted(submission), "feedback-form")

    @app.action(re.compile(r"^value$"))
    async def on_select(ack: AsyncAck) -> None:
        await ack()  # choosing in a form's select: the Submit button carries the values

    @app.event("app_home_opened")
    async def on_home(event: dict[str, Any]) -> None:
        await handle(inbound.on_home_opened(event), "home")

    # Everything else Slack may send (reaction_added, member_joined_channel, an unknown view or shortcut):
    # acknowledged and ignored. Bolt would answer 404, which Slack counts as a failed delivery and retries.
    @app.event(re.compile(r".*"))
    async def any_event() -> None:
        return None

    @app.action(re.compile(r".*"))
    @app.view(re.compile(r".*"))
    @app.shortcut(re.compile(r".*"))
    async def any_interaction(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        log.info("ignored a %s nobody here handles", body.get("type"))

    @app.error
    async def on_error(error: Exception, body: dict[str, Any]) -> None:
        log.error("unhandled error in a Slack listener: %r", error)

    return app


StoreFirst = Callable[[bytes, str], Awaitable[bool]]
"""A front's durable store for a request it is about to acknowledge: True once stored, False if not in time."""


def _handshake(raw: bytes) -> bool:
    """Slack's URL check and SSL check: answered here, nothing to store."""
    return b'"url_verification"' in raw[:300] or raw.startswith(b"ssl_check=") or b"&ssl_check=1" in raw[:300]


READY_TIMEOUT_S = 2.0
Readiness = Callable[[], Awaitable[str | None]]


def readiness(*, store: Store, queue: WorkQueue, front: bool, worker: Worker | None,
              link: Readiness | None = None, identity: Identity | None = None) -> Readiness:
    """Why this process cannot do its part right now (one line), or None: Redis answers and takes writes; a front
    also needs the bot's identity (else it answers every request 503) and a worker that read the queue lately
    (else its work would wait), a worker its own read loop running; in Socket Mode, the connection to Slack
    (events arrive only through it)."""
    async def check() -> str | None:
        problem = await link() if link is not None else None
        if problem:
            return problem
        try:
            await asyncio.wait_for(store.ping(write=True), READY_TIMEOUT_S)
            if identity is not None and await asyncio.wait_for(identity.get(), READY_TIMEOUT_S * 2) is None:
                return "the bot's identity is not known (Slack's auth.test is failing): requests are answered 503"
            if front and not await asyncio.wait_for(queue.readers(READ_WINDOW_S), READY_TIMEOUT_S):
                return f"no worker has read the work queue in the last {READ_WINDOW_S:g} s"
        except TimeoutError:
            return f"Redis did not answer within {READY_TIMEOUT_S:g} s"
        except StoreError as exc:
            return " ".join(str(exc).split())
        if worker is not None and not worker.reading():
            return f"this worker has not read the work queue in the last {READ_WINDOW_S:g} s"
        return None

    return check


def web_routes(*, bolt: Callable[[], AsyncApp], signing_secret: str, store: Store, outbox: SlackOutbox,
               queue: WorkQueue, metrics: Metrics, path: str = "/slack/events",
               tools_health: Callable[[], dict[str, Any]] | None = None,
               ready: Readiness | None = None, identity: Identity | None = None,
               store_first: StoreFirst | None = None) -> list[web.RouteDef]:
    async def events(request: web.Request) -> web.Response:
        raw = await request.read()
        refused = refusal(signing_secret, raw, request.headers, request.content_type)
        if refused is not None:
            metrics.inc("opspilot_requests_refused_total", status=str(refused[0]))
            return web.Response(status=refused[0], text=refused[1])
        if identity is not None and b'"url_verification"' not in raw[:300] and await identity.get() is None:
            # Not acknowledged: Slack delivers an event again, and shows a click's or a command's sender an
            # error to retry — better than a 200 for something that is then dropped.
            metrics.inc("opspilot_requests_refused_total", status="503")
            return web.Response(status=503, text="the bot's identity is not known yet (Slack's auth.test is "
                                                 "failing); try again")
        if store_first is not None and not _handshake(raw):
            if not await store_first(raw, request.content_type):
                metrics.inc("opspilot_requests_refused_total", status="503")
                return web.Response(status=503, text="could not store this request in time; try again")
            return web.Response(status=200, text="")  # acknowledged once stored: a worker reads it
        from slack_bolt.adapter.aiohttp import to_aiohttp_response
        from slack_bolt.request.async_request import AsyncBoltRequest

        bolt_request = AsyncBoltRequest(body=bolt_text(raw.decode("utf-8"), request.content_type),
                                        query=request.query_string, headers=dict(request.headers))
        return await to_aiohttp_response(await bolt().async_dispatch(bolt_request))

    async def healthz(request: web.Request) -> web.Response:
        # Alive, nothing more: a Redis outage must not get a live process restarted (that is /readyz's to say).
        health: dict[str, Any] = {"ok": True, "store": "redis" if store.durable else "in-process (not durable)"}
        if tools_health is not None:  # a down MCP server is reported, not fatal: its calls fail as observations
            health["mcp_servers"] = tools_health()
        return web.json_response(health)

    async def readyz(request: web.Request) -> web.Response:
        reason = await ready() if ready is not None else None
        return web.Response(status=503 if reason else 200, text=f"{reason or 'ready'}\n")

    async def prometheus(request: web.Request) -> web.Response:
        try:
            waiting = float(len(await store.runs_due("paused", float("inf"))))
            undelivered = float(await outbox.backlog())
            work = await queue.stats()
            gauges = [("opspilot_work_queue_length", float(work.length)),
                      ("opspilot_work_pending", float(work.pending)),
                      ("opspilot_work_oldest_pending_seconds", work.oldest_pending_s),
                      ("opspilot_work_redelivered_pending", float(work.redelivered)),
                      ("opspilot_work_dead_letters", float(work.dead))]
        except StoreError:
            waiting = undelivered = float("nan")
            gauges = []
        body = metrics.render([("opspilot_interrupts_pending", waiting),
                               ("opspilot_outbox_threads_undelivered", undelivered), *gauges])
        return web.Response(text=body, content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})

    return [web.post(path, events), web.get("/healthz", healthz), web.get("/readyz", readyz),
            web.get("/metrics", prometheus)]
