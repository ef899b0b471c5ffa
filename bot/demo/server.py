"""``opspilot demo``: a Slack-like channel in the browser, talking to the unchanged bot in HTTP mode.

One aiohttp process serves three things on one port:
  /            the page (a channel with threads, live edits, Block Kit, a user switcher)
  /api/*       a Slack-compatible Web API (:class:`LocalSlack`) the bot posts to
  /slack/events the bot's own endpoint, which the page's backend calls with properly signed
               Events API, ``block_actions`` and ``view_submission`` requests — exactly what Slack would send.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bot import exits
from bot.config import AlertSource, Approvers, Settings
from bot.demo.local_server import LocalServer
from bot.demo.sender import SlackSender, view_submission
from bot.demo.workspace import BOT_USER, TEAM, LocalSlack
from bot.slack.serve import PortTaken
from bot.slack.service import SlackService, build_service
from state import RedisStore
from state.client import safe_url

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
CHANNEL = "C0OPSDEMO"
ALERTS = "C0ALERTSDEMO"
CHANNELS = {CHANNEL: {"name": "ops-oncall", "topic": "Ask @OpsPilot about an incident. Try: "
                                                    "看看支付服务最近报错，顺便对照一下文档里的处理建议"},
            ALERTS: {"name": "ops-alerts", "topic": "Alertmanager posts here; OpsPilot investigates each alert in "
                                                    "its thread. Fire the demo alert to see it."}}
USERS = {
    "U0ALICE": {"name": "Alice", "role": "on-call engineer (asks)"},
    "U0BOB": {"name": "Bob", "role": "SRE lead (approves prod changes)"},
    "U0MALLORY": {"name": "Mallory", "role": "not allowed to use OpsPilot"},
}


def demo_prefix(prefix: str) -> str:
    """The demo's own key prefix: demo threads never mix with a real bot's state in the same Redis."""
    return f"{prefix}-demo"


def demo_settings(settings: Settings, port: int) -> Settings:
    """The demo's workspace: random tokens, the local Web API, and approval rules worth showing."""
    slack = settings.slack.model_copy(update={
        "bot_token": f"xoxb-demo-{secrets.token_hex(8)}", "signing_secret": secrets.token_hex(16),
        "app_token": None, "api_url": f"http://127.0.0.1:{port}/api/", "port": port,
        "allowed_users": ["U0ALICE", "U0BOB"], "two_person_rule": ["prod"],
        "approvers": {"restart_service": {"prod": Approvers(users=["U0BOB"])}},
        "alert_sources": [AlertSource(channel=ALERTS, bot_ids=["B0ALERTS"], mode="investigate")],
        "progress_interval_s": min(settings.slack.progress_interval_s, 0.5),
    })
    return settings.model_copy(update={"slack": slack, "key_prefix": demo_prefix(settings.key_prefix)})


class Demo:
    def __init__(self, settings: Settings, port: int) -> None:
        self.settings = demo_settings(settings, port)
        self.port = port
        self.slack = LocalSlack(token=str(self.settings.slack.bot_token))
        self.slack.profiles = {user: about["name"] for user, about in USERS.items()}
        self.service: SlackService | None = None
        self.hook = ""
        self.slack.deliver = self._deliver_event  # the webhook's bot message, as Slack sends it to the app
        self._feeds: set[asyncio.Queue[dict[str, Any]]] = set()
        self.slack.watchers.append(self._broadcast)

    async def start(self) -> LocalServer:
        """Listening on the port, the bot running; or :class:`PortTaken`, with what was opened closed again."""
        self.service = await build_service(self.settings, fallback_store=True)
        try:
            return await self._serve(self.service)
        except BaseException:
            await self.close()
            raise

    async def _fresh(self, service: SlackService) -> None:
        """A demo starts empty. Its page's messages live in this process only, so the records an earlier run left in
        Redis (an alert investigated within the hour, cards waiting on Bob) would point at threads this page never
        shows: "Fired again … in this thread" into a thread that is not there. Only the demo's own prefix is
        cleared (``opspilot report --demo`` reads the last run's records until the next one starts)."""
        store = service.core.store
        if not isinstance(store, RedisStore):
            return
        pipe = store.client.pipeline(transaction=False)  # one key at a time: a Cluster's keys are in many slots
        for pattern in store.keys.patterns():
            async for key in store.client.scan_iter(match=pattern, count=1000):
                pipe.delete(key)
        await pipe.execute()

    async def _serve(self, service: SlackService) -> LocalServer:
        if service.timers is not None:  # "Re-check in 1 min": a follow-up the page shows while one watches
            service.timers.slack.recheck_minutes = service.renderer.rechecks = 1
        app = web.Application()
        app.router.add_routes(self.slack.routes())
        app.router.add_routes(service.routes)  # the bot's /slack/events, /healthz, /metrics
        app.router.add_get("/", self.page)
        app.router.add_static("/static", STATIC)
        app.router.add_get("/demo/state", self.state)
        app.router.add_get("/demo/feed", self.feed)
        app.router.add_post("/demo/say", self.say)
        app.router.add_post("/demo/click", self.click)
        app.router.add_post("/demo/submit", self.submit)
        app.router.add_post("/demo/alert", self.alert)
        app.router.add_post("/demo/home", self.home)
        app.router.add_get("/demo/files/{file_id}", self.file)
        server = LocalServer(app, port=self.port)
        try:
            await server.start()
        except OSError as exc:
            await server.stop()
            raise PortTaken.at(self.port, exc) from exc
        self.port = server.port
        try:
            await self._fresh(service)  # only once the port is ours: a second demo refused it wipes nothing
        except BaseException:
            await server.stop()
            raise
        self.hook = self.slack.add_webhook(ALERTS, base_url=server.url)
        # The local Slack's routes are served here, not on its own server: uploads go to this port.
        self.slack.upload_base_url = server.url
        service.start()
        return server

    async def close(self) -> None:
        if self.service is not None:
            await self.service.stop(5)
            await self.service.core.close_connections()

    # --- the page and its live feed ---------------------------------------------------------------------

    async def page(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    async def state(self, request: web.Request) -> web.Response:
        assert self.service is not None
        core = self.service.core
        return web.json_response({
            "channel": {"id": CHANNEL, "name": "ops-oncall"}, "bot": {"id": BOT_USER, "name": "OpsPilot"},
            "channels": [{"id": c, **about} for c, about in CHANNELS.items()],
            "users": USERS, "model": core.model.label, "scripted": core.model.scripted,
            "store": "Redis (durable)" if core.store.durable else "in-process store — NOT durable",
            "messages": sorted(self.slack.messages.values(), key=lambda m: float(m["ts"])),
            "ephemerals": self.slack.ephemerals,
            "canvases": list(self.slack.canvases.values()),
        })

    async def file(self, request: web.Request) -> web.Response:
        """A file shared in a channel (a summary as Markdown where canvases are refused), for its attachment on
        the page to open: always as plain text, never sniffed as HTML (its content is whatever was uploaded)."""
        upload = self.slack.uploads.get(request.match_info["file_id"])
        if upload is None or upload.get("content") is None or "shared_in" not in upload:
            return web.Response(status=404, text="no such file")
        return web.Response(body=upload["content"], content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"})

    async def feed(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: every message posted or edited, every ephemeral, modal and canvas change."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._feeds.add(queue)
        try:
            await response.write(b": connected\n\n")
            while True:
                try:
                    change = await asyncio.wait_for(queue.get(), 15)
                    await response.write(f"data: {json.dumps(change, ensure_ascii=False)}\n\n".encode())
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._feeds.discard(queue)
        return response

    async def _broadcast(self, change: dict[str, Any]) -> None:
        for queue in list(self._feeds):
            queue.put_nowait(change)

    # --- people writing and clicking -----------------------------------------------------------------------

    async def say(self, request: web.Request) -> web.Response:
        body = await _body(request)
        user, text = _text(body, "user"), _text(body, "text").strip()
        thread_ts, channel = _text(body, "thread_ts") or None, _text(body, "channel") or CHANNEL
        if user not in USERS or not text or channel not in CHANNELS:
            return web.json_response({"ok": False, "error": "choose a user and write something"}, status=400)
        wire = text.replace("@OpsPilot", f"<@{BOT_USER}>")
        message = self.slack.post_as_user(channel, user, wire, thread_ts)
        await self._broadcast({"type": "message", "message": message})
        event: dict[str, Any] = {"type": "message", "channel": channel, "user": user, "text": wire,
                                 "ts": message["ts"], "channel_type": "channel"}
        if thread_ts:
            event["thread_ts"] = thread_ts
        deliveries = [event]
        if f"<@{BOT_USER}>" in wire:  # Slack sends a mention twice: as app_mention and as message
            deliveries.insert(0, {**event, "type": "app_mention"})
        for delivered in deliveries:
            await self._deliver_event(delivered)
        return web.json_response({"ok": True, "ts": message["ts"]})

    async def click(self, request: web.Request) -> web.Response:
        body = await _body(request)
        user, channel, values = _text(body, "user"), _text(body, "channel") or CHANNEL, _object(body, "values")
        action = {"type": _text(body, "type", "button"), "action_id": _text(body, "action_id"),
                  "block_id": _text(body, "block_id"), "value": _text(body, "value"), "action_ts": f"{time.time():.6f}"}
        if _text(body, "message_ts") == "home" and user in USERS:  # a button on App Home: no conversation, a view
            view = {"id": f"V{user}", "type": "home"}
            status, _ = await self._sender().action({
                "type": "block_actions", "team": {"id": TEAM}, "user": {"id": user, "username": USERS[user]["name"]},
                "api_app_id": "A0DEMO", "token": "unused", "trigger_id": f"{time.time():.3f}",
                "container": {"type": "view", "view_id": view["id"]}, "view": view, "actions": [action]})
            return web.json_response({"ok": status == 200})
        message = self.slack.messages.get((channel, _text(body, "message_ts")))
        if user not in USERS or message is None:
            return web.json_response({"ok": False, "error": "unknown user or message"}, status=400)
        payload = {
            "type": "block_actions", "team": {"id": TEAM}, "user": {"id": user, "username": USERS[user]["name"]},
            "api_app_id": "A0DEMO", "token": "unused", "trigger_id": f"{time.time():.3f}",
            "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel},
            "channel": {"id": channel, "name": CHANNELS.get(channel, {}).get("name", channel)},
            "message": {"ts": message["ts"], "thread_ts": message.get("thread_ts"), "blocks": message["blocks"]},
            "state": {"values": values},
            "response_url": self.slack.response_url(channel, message["ts"], base_url=f"http://127.0.0.1:{self.port}"),
            "actions": [action],
        }
        self.slack.triggers[str(payload["trigger_id"])] = user  # a modal it opens shows to whoever clicked
        status, _ = await self._sender().action(payload)
        return web.json_response({"ok": status == 200})

    async def submit(self, request: web.Request) -> web.Response:
        """A modal sent (Slack's ``view_submission``): the bot's refusal, if any, comes back to show in it."""
        body = await _body(request)
        user, view_id = _text(body, "user"), _text(body, "view_id")
        opened = next((m for m in reversed(self.slack.modals) if m["view"]["id"] == view_id), None)
        if user not in USERS or opened is None or opened["user"] != user:
            return web.json_response({"ok": False, "error": "unknown user or form"}, status=400)
        values = _object(body, "values")
        status, text = await self._sender().action(view_submission(user=user, view=opened["view"], values=values))
        answer = json.loads(text) if status == 200 and text.startswith("{") else {}
        return web.json_response({"ok": status == 200 and not answer.get("errors"), "errors": answer.get("errors")})

    async def home(self, request: web.Request) -> web.Response:
        """The Home tab opened: Slack's app_home_opened event to the bot, then the view it published."""
        user = _text(await _body(request), "user")
        if user not in USERS:
            return web.json_response({"ok": False, "error": "unknown user"}, status=400)
        before = self.slack.homes.pop(user, None)
        await self._deliver_event({"type": "app_home_opened", "user": user, "channel": f"D{user}", "tab": "home",
                                   "ts": f"{time.time():.6f}"})
        for _ in range(100):  # the bot answers after the acknowledgement, in the background
            if user in self.slack.homes:
                return web.json_response({"ok": True, "view": self.slack.homes[user]})
            await asyncio.sleep(0.05)
        if before is not None:
            self.slack.homes[user] = before
        return web.json_response({"ok": False, "error": "OpsPilot did not publish a Home view in time."})

    async def alert(self, request: web.Request) -> web.Response:
        """The demo's alert fires (or resolves): posted to the incoming webhook over HTTP, as Alertmanager
        would, so it reaches the bot exactly as a real alert does."""
        status = "resolved" if _text(await _body(request), "status") == "resolved" else "firing"
        async with aiohttp.ClientSession() as session, session.post(self.hook, json=demo_alert(status)) as answer:
            return web.json_response({"ok": answer.status == 200})

    async def _deliver_event(self, event: dict[str, Any]) -> None:
        envelope = {"token": "unused", "team_id": TEAM, "api_app_id": "A0DEMO", "type": "event_callback",
                    "event_id": f"Ev{secrets.token_hex(6)}", "event_time": int(time.time()),
                    "event": {**event, "event_ts": event["ts"]},
                    "authorizations": [{"team_id": TEAM, "user_id": BOT_USER, "is_bot": True}]}
        await self._sender().post(json.dumps(envelope), "application/json")

    def _sender(self) -> SlackSender:
        """Signed with the app's signing secret, to the bot's own endpoint, exactly as Slack would."""
        return SlackSender(f"http://127.0.0.1:{self.port}/slack/events", str(self.settings.slack.signing_secret))


def _refused(reason: str) -> web.HTTPBadRequest:
    """A 400 the page shows; raised, so aiohttp answers it and logs no traceback."""
    return web.HTTPBadRequest(text=json.dumps({"ok": False, "error": reason}), content_type="application/json")


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:  # not JSON, or not UTF-8
        raise _refused("the body is not JSON") from None
    if not isinstance(body, dict):
        raise _refused("the body is not a JSON object")
    return body


def _text(body: dict[str, Any], key: str, default: str = "") -> str:
    """A field the page sends as a string: absent or null is ``default`` (never the word "None")."""
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise _refused(f"{key} must be a string")
    return value


def _object(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refused(f"{key} must be an object")
    return value


def demo_alert(status: str) -> dict[str, Any]:
    """What Alertmanager posts for the demo's alert, with a common labels/annotations text template."""
    head = f"[{status.upper()}{':1' if status == 'firing' else ''}] PaymentsHighErrorRate payments-api (prod critical)"
    return {"username": "Alertmanager", "attachments": [{
        "title": head, "fallback": head, "color": "danger" if status == "firing" else "good",
        "text": "*Labels:*\n• alertname: `PaymentsHighErrorRate`\n• service: `payments-api`\n• env: `prod`\n"
                "• severity: `critical`\n*Annotations:*\n• summary: payments-api answers more than 2% 5xx"}]}


async def run_demo(settings: Settings, port: int) -> int:
    demo = Demo(settings, port)
    try:
        server = await demo.start()
    except PortTaken as exc:
        print(f"opspilot: {exc}", file=sys.stderr)
        return exits.UNAVAILABLE
    assert demo.service is not None
    store = f"Redis at {safe_url(demo.settings.redis_url)}, keys under {demo.settings.key_prefix}:" \
        if demo.service.core.store.durable else \
        f"in-process, NOT durable (no Redis answered at {safe_url(demo.settings.redis_url)})"
    print(f"OpsPilot demo: open {server.url}  (model: {demo.service.core.model.label}; store: {store})", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await demo.close()
        await server.stop()
    return 0
