"""A local, Slack-compatible Web API: the workspace behind ``opspilot demo`` and the tests' fake Slack.

It keeps channels and threads in memory, checks the bot token, rejects Block Kit beyond Slack's
documented limits (blocks per message, text lengths, unique ids, elements per block, options,
confirm dialogs) with ``invalid_blocks``, rejects ``msg_too_long``, and can answer 429 with
``Retry-After`` (a fixed number of times, or a per-minute budget per method) as Slack's rate
limiter does. Socket Mode (``apps.connections.open`` + a websocket) is served too. Every change is
announced to ``watchers`` (the demo page's live feed).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from bot.demo.block_limits import Fault, block_problems
from bot.demo.canvases import CanvasMethods
from bot.demo.channels import ChannelMethods
from bot.demo.local_server import LocalServer
from bot.demo.response_urls import ResponseMethods
from bot.demo.stream_api import STREAM_METHODS, TIERS, StreamMethods
from bot.demo.views import ViewMethods
from bot.demo.webhooks import WebhookMethods

BOT_USER = "UBOT"
TEAM = "T0001"  # the one workspace this fake Slack is; auth.test answers it, requests carry it


_FAKE_ONLY = frozenset({"stream", "was_stream"})
Watcher = Callable[[dict[str, Any]], Awaitable[None]]


class LocalSlack(StreamMethods, ViewMethods, CanvasMethods, WebhookMethods, ChannelMethods, ResponseMethods):
    def __init__(self, token: str = "xoxb-test-token") -> None:
        self.token = token
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.ephemerals: list[dict[str, Any]] = []
        self.usergroups: dict[str, list[str]] = {}
        self.usergroup_handles: dict[str, str] = {}
        """User groups' handles (``sre-oncall``) by id, for usergroups.list (unlisted: the id)."""
        self.deleted: list[dict[str, Any]] = []
        """Messages removed with chat.delete, in order."""
        self.rejected: list[tuple[str, str]] = []
        self._last_ts = 0.0
        self._fail_next: dict[str, int] = defaultdict(int)
        self._budget: dict[str, int] = {}
        self._recent: dict[str, deque[float]] = defaultdict(deque)
        self._post_window: tuple[int, float] | None = None
        self.rate_limited = 0
        self.faults: list[Fault] = []
        self.scopes: list[str] | None = None  # what auth.test reports in x-oauth-scopes (None: no header)
        self.bot_user: str | None = BOT_USER
        self._budget.update(TIERS)  # the streaming methods' rate tiers hold by default, as in Slack
        self.stream_timeout_s = 300.0
        self.streams_supported = True  # False: a workspace without the streaming methods (unknown_method)
        self.members: dict[str, set[str]] = {}  # where a test needs them (a stream's recipient is one); else: anyone
        self.private: set[str] = set()  # conversations.info's is_private (conversations.members: who is in one)
        self.absent: set[str] = set()  # channels the bot is not in: posts there are not_in_channel
        self.archived: set[str] = set()  # archived channels: members kept, every post is_archived
        self.statuses: dict[tuple[str, str], str] = {}
        self.streams_started: list[dict[str, Any]] = []
        self.status_log: list[tuple[str, str, str]] = []
        """The bot's user id as auth.test reports it; None: auth.test leaves it out (tests of that case)."""
        app = web.Application()
        app.router.add_post("/api/{method}", self._dispatch)
        app.router.add_get("/api/{method}", self._dispatch)
        app.router.add_get("/socket-mode", self._socket)
        app.router.add_routes(self.webhook_routes())
        app.router.add_post("/response/{id}", self._response)
        app.router.add_routes(self.canvas_routes())
        self.canvases: dict[str, dict[str, Any]] = {}
        self.uploads: dict[str, dict[str, Any]] = {}
        self.canvases_refused: str | None = None  # an error every canvas call answers (a workspace without them)
        self.upload_base_url: str | None = None  # where /upload/… is served when not on this server (the demo)
        self.team_id = TEAM
        self.webhooks: dict[str, dict[str, str]] = {}
        self.profiles: dict[str, str] = {}  # users.info's names by id (anyone else: a member with no name set)
        self.unknown_users: set[str] = set()  # users.info: user_not_found (another organisation's, a deleted one)
        self.external_users: dict[str, str] = {}  # Slack Connect accounts: id → their organisation's team id
        self.enterprise = ""  # this workspace's Enterprise Grid organisation (auth.test's enterprise_id), if any
        self.grid_users: dict[str, str] = {}  # users.info's enterprise_user.enterprise_id, by user id
        self.user_timezones: dict[str, str] = {}  # users.info's tz, where one is set
        self.guests: set[str] = set()  # users.info's is_restricted: they read only the channels they are in
        self.homes: dict[str, dict[str, Any]] = {}  # the App Home view published for each user
        self.responses: list[dict[str, Any]] = []  # what was posted to a command's or an action's response_url
        self._response_urls: dict[str, dict[str, Any]] = {}
        self.modals: list[dict[str, Any]] = []
        self.triggers: dict[str, str] = {}
        self._deliveries: set[asyncio.Task[Any]] = set()
        self.deliver = None
        self.app_token = "xapp-test-token"
        self.sockets: list[web.WebSocketResponse] = []
        self.acks: list[dict[str, Any]] = []
        self.watchers: list[Watcher] = []
        self.server = LocalServer(app)

    def routes(self) -> list[web.RouteDef]:
        """The Web API routes, to mount in another aiohttp app (the demo serves them next to its page)."""
        return [web.post("/api/{method}", self._dispatch), web.get("/api/{method}", self._dispatch),
                web.get("/socket-mode", self._socket), web.post("/response/{id}", self._response),
                *self.webhook_routes(), *self.canvas_routes()]

    async def _announce(self, change: dict[str, Any]) -> None:
        for watcher in list(self.watchers):
            await watcher(change)

    def _next_ts(self) -> str:
        """Slack-style message timestamps: unique, increasing, from the clock."""
        self._last_ts = max(time.time(), self._last_ts + 0.000001)
        return f"{self._last_ts:.6f}"

    def post_as_user(self, channel: str, user: str, text: str, thread_ts: str | None = None,
                     ts: str | None = None) -> dict[str, Any]:
        """A person writes in the channel (the demo page's composer; a test may choose the ``ts``)."""
        ts = ts or self._next_ts()
        message: dict[str, Any] = {"ts": ts, "channel": channel, "user": user, "text": text, "blocks": [],
                                   "thread_ts": thread_ts, "edits": 0}
        self.messages[(channel, ts)] = message
        return message

    @property
    def api_url(self) -> str:
        return f"{self.server.url}/api/"

    # --- test controls -----------------------------------------------------------------------------------------

    def fault(self, kind: str, *methods: str, for_s: float | None = None, times: int | None = None,
              status: int = 500, hang_s: float = 30.0, error: str = "fatal_error", rate: float = 1.0) -> Fault:
        """Make Slack misbehave (see :class:`Fault`) for ``for_s`` seconds and/or ``times`` calls."""
        fault = Fault(kind, frozenset(methods), time.monotonic() + for_s if for_s is not None else float("inf"),
                      float(times) if times is not None else float("inf"), status, hang_s, error, rate)
        self.faults.append(fault)
        return fault

    def rate_limit_next(self, method: str, times: int = 1) -> None:
        self._fail_next[method] += times

    def per_minute(self, method: str, budget: int) -> None:
        self._budget[method] = budget

    def posts_per_channel(self, count: int, window_s: float) -> None:
        """chat.postMessage: at most ``count`` per ``window_s`` in any one channel (Slack: ~1 per second)."""
        self._post_window = (count, window_s)

    def called(self, method: str) -> list[dict[str, Any]]:
        return [body for m, body in self.calls if m == method]

    def thread(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        return sorted((m for (c, _), m in self.messages.items()
                       if c == channel and (m.get("thread_ts") == thread_ts or m["ts"] == thread_ts)),
                      key=lambda m: float(m["ts"]))

    def ephemeral_texts(self, user: str | None = None) -> list[str]:
        return [e["text"] for e in self.ephemerals if user is None or e["user"] == user]

    # --- the API ---------------------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if request.method == "GET":
            body: dict[str, Any] = dict(request.query)
        elif request.content_type == "application/json":
            body = await request.json()
        else:
            body = dict(await request.post())
        if request.method == "POST":  # slack-sdk sends some methods' arguments in the query (chat.delete)
            body = {**dict(request.query), **body}
        for key in ("blocks", "attachments", "metadata", "chunks"):
            if isinstance(body.get(key), str):
                body[key] = json.loads(body[key])
        self.calls.append((method, body))
        fault = next((f for f in self.faults if f.applies(method)), None)
        kind, status = fault.pick() if fault is not None else ("", 0)
        if fault is not None:
            fault.times -= 1
            if kind == "hang":
                await asyncio.sleep(fault.hang_s)
            if kind in ("hang", "error"):
                return web.json_response({"ok": False, "error": "fatal_error"}, status=status)
            if kind == "text":  # a proxy's 5xx page: not JSON at all
                return web.Response(status=status, text=f"{status} Bad Gateway", content_type="text/plain")
            if kind == "refuse":
                return web.json_response({"ok": False, "error": fault.error})
            if kind == "limited":
                return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                         headers={"Retry-After": "1"})
            if kind == "reset" and request.transport is not None:
                request.transport.abort()  # the connection drops: the client sees no answer at all
                return web.Response(status=500)
        if method == "apps.connections.open":
            if request.headers.get("Authorization") != f"Bearer {self.app_token}":
                return web.json_response({"ok": False, "error": "invalid_auth"})
            ws_url = self.server.url.replace("http://", "ws://") + "/socket-mode"
            return web.json_response({"ok": True, "url": ws_url})
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if self._limited(method) or self._post_limited(method, body):
            self.rate_limited += 1
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"})
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None or (method in STREAM_METHODS and not self.streams_supported):
            return web.json_response({"ok": False, "error": "unknown_method"})
        problem = self._validate(method, body)
        if problem is not None:
            self.rejected.append((method, problem))
            return web.json_response({"ok": False, "error": problem.split(":")[0], "errors": [problem]})
        answer = handler(body)
        if fault is not None and kind == "lost":
            return web.json_response({"ok": False, "error": "fatal_error"}, status=status)
        if answer.get("ok") and method in ("chat.postMessage", "chat.update", *STREAM_METHODS):
            await self._announce({"type": "message", "message": self.messages[(body["channel"], answer["ts"])]})
        elif answer.get("ok") and method == "chat.delete":
            await self._announce({"type": "deleted", "channel": answer["channel"], "ts": answer["ts"]})
        elif answer.get("ok") and method == "chat.postEphemeral":
            await self._announce({"type": "ephemeral", "ephemeral": self.ephemerals[-1]})
        elif answer.get("ok") and method == "views.open":
            await self._announce({"type": "modal", "modal": self.modals[-1]})
        elif answer.get("ok") and method in ("canvases.create", "canvases.edit"):
            canvas_id = str(answer.get("canvas_id") or body.get("canvas_id"))
            await self._announce({"type": "canvas", "canvas": self.canvases[canvas_id]})
        elif answer.get("ok") and method == "files.completeUploadExternal" and body.get("channel_id"):
            where = self.uploads[answer["files"][0]["id"]]["shared_in"]  # the message that shares the files
            await self._announce({"type": "message", "message": self.messages[where]})
        scopes = {"x-oauth-scopes": ",".join(self.scopes)} if method == "auth.test" and self.scopes else None
        return web.json_response(answer, headers=scopes)

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        """Socket Mode: say hello, then forward envelopes the test pushes; collect the acks."""
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        await ws.send_json({"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0001"},
                            "debug_info": {"host": "fake"}})
        async for msg in ws:
            if msg.type == web.WSMsgType.TEXT:
                self.acks.append(json.loads(msg.data))
        return ws

    async def push(self, envelope_id: str, payload: dict[str, Any], kind: str = "events_api") -> None:
        """Deliver one Socket Mode envelope to the connected app (retry_attempt 0, as redeliveries are)."""
        await self.sockets[-1].send_json({"envelope_id": envelope_id, "type": kind, "payload": payload,
                                          "accepts_response_payload": kind != "events_api", "retry_attempt": 0,
                                          "retry_reason": ""})

    def _post_limited(self, method: str, body: dict[str, Any]) -> bool:
        if method != "chat.postMessage" or self._post_window is None:
            return False
        count, window = self._post_window
        now, recent = time.monotonic(), self._recent[f"post:{body.get('channel')}"]
        while recent and recent[0] < now - window:
            recent.popleft()
        if len(recent) >= count:
            return True
        recent.append(now)
        return False

    def _limited(self, method: str) -> bool:
        if self._fail_next[method] > 0:
            self._fail_next[method] -= 1
            return True
        budget = self._budget.get(method)
        if budget is None:
            return False
        now, recent = time.monotonic(), self._recent[method]
        while recent and recent[0] < now - 60:
            recent.popleft()
        if len(recent) >= budget:
            return True
        recent.append(now)
        return False

    def _validate(self, method: str, body: dict[str, Any]) -> str | None:
        if method in STREAM_METHODS:
            return self.stream_problem(method, body, TEAM)
        if method not in ("chat.postMessage", "chat.update", "chat.postEphemeral"):
            return None
        if not body.get("channel") or self.outside(str(body["channel"])):
            return "channel_not_found"
        if body["channel"] in self.archived:
            return "is_archived"
        if method != "chat.update" and body["channel"] in self.absent:
            return "not_in_channel"
        if len(str(body.get("text") or "")) > 40_000:
            return "msg_too_long"
        blocks = body.get("blocks")
        if not blocks and not body.get("text"):
            return "no_text"
        if blocks:
            problems = block_problems(blocks)
            if problems:
                return "invalid_blocks: " + "; ".join(problems)
        if method == "chat.update" and (body["channel"], body.get("ts")) not in self.messages:
            return "message_not_found"
        return None

    def _auth_test(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = {"ok": True, "url": "https://fake.slack.test/", "team": "Fake", "user": "opspilot",
                  "team_id": TEAM, "user_id": self.bot_user, "bot_id": "B0001", "is_enterprise_install": False,
                  "enterprise_id": self.enterprise or None}
        return {k: v for k, v in answer.items() if v is not None}

    def _chat_postMessage(self, body: dict[str, Any]) -> dict[str, Any]:
        ts = self._next_ts()
        message = {"ts": ts, "channel": body["channel"], "text": body.get("text", ""), "bot": True,
                   "user": self.bot_user or BOT_USER, "bot_id": "B0001",
                   "blocks": body.get("blocks") or [], "thread_ts": body.get("thread_ts"), "edits": 0}
        if body.get("metadata"):
            message["metadata"] = body["metadata"]
        self.messages[(body["channel"], ts)] = message
        self.statuses.pop((body["channel"], str(body.get("thread_ts"))), None)  # the app replied: status clears
        return {"ok": True, "channel": body["channel"], "ts": ts, "message": message}

    def _chat_update(self, body: dict[str, Any]) -> dict[str, Any]:
        message = self.messages[(body["channel"], body["ts"])]
        if message.get("stream") and self._streaming(message):
            return {"ok": False, "error": "message_is_streaming"}
        stream = message.pop("stream", None)
        if stream is not None:
            message["was_stream"] = stream["state"]  # its content is now these blocks; how the stream had ended
        message.update(text=body.get("text", ""), blocks=body.get("blocks") or [], edits=message["edits"] + 1)
        return {"ok": True, "channel": body["channel"], "ts": body["ts"], "text": message["text"]}

    def _chat_delete(self, body: dict[str, Any]) -> dict[str, Any]:
        key = (str(body.get("channel")), str(body.get("ts")))
        message = self.messages.get(key)
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        if not message.get("bot"):  # a bot token deletes only the bot's own messages
            return {"ok": False, "error": "cant_delete_message"}
        self.deleted.append(self.messages.pop(key))
        return {"ok": True, "channel": key[0], "ts": key[1]}

    def _chat_postEphemeral(self, body: dict[str, Any]) -> dict[str, Any]:
        self.ephemerals.append({"channel": body["channel"], "user": body.get("user"), "text": body.get("text", ""),
                                "thread_ts": body.get("thread_ts"), "ts": f"{time.time():.6f}"})
        return {"ok": True, "message_ts": f"{time.time():.6f}"}

    def _conversations_replies(self, body: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(body.get("channel")), str(body.get("ts"))
        with_metadata = str(body.get("include_all_metadata")).lower() in ("1", "true")
        oldest = float(body.get("oldest") or 0)
        inclusive = str(body.get("inclusive")).lower() in ("1", "true")
        # What the fake keeps of a stream's parts is its own bookkeeping: Slack shows a message, not its stream.
        found = [{k: v for k, v in m.items() if k not in _FAKE_ONLY and (k != "metadata" or with_metadata)}
                 for m in self.thread(channel, ts)
                 if not oldest or float(m["ts"]) > oldest or (inclusive and float(m["ts"]) == oldest)]
        start, limit = int(body.get("cursor") or 0), int(body.get("limit") or 1000)
        more = start + limit < len(found)
        return {"ok": True, "messages": found[start:start + limit], "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def _users_info(self, body: dict[str, Any]) -> dict[str, Any]:
        user = str(body.get("user"))
        if user in self.unknown_users:
            return {"ok": False, "error": "user_not_found"}
        guest = {"is_restricted": True} if user in self.guests else {}
        grid = {"enterprise_user": {"id": user, "enterprise_id": self.grid_users[user]}} if user in self.grid_users \
            else {}
        about = {"id": user, "team_id": self.external_users.get(user, self.team_id), **guest, **grid}
        if user not in self.profiles:
            return {"ok": True, "user": about}
        name = self.profiles[user]
        zone = {"tz": self.user_timezones[user]} if user in self.user_timezones else {}
        return {"ok": True, "user": {**about, "name": name.lower(), "real_name": name, **zone,
                                     "profile": {"display_name": name, "real_name": name}}}

    def _usergroups_users_list(self, body: dict[str, Any]) -> dict[str, Any]:
        group = str(body.get("usergroup"))
        if group not in self.usergroups:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": self.usergroups[group]}

    def _usergroups_list(self, body: dict[str, Any]) -> dict[str, Any]:
        ids = sorted({*self.usergroups, *self.usergroup_handles})
        return {"ok": True, "usergroups": [{"id": g, "handle": self.usergroup_handles.get(g, g),
                                            "name": self.usergroup_handles.get(g, g)} for g in ids]}

    def _reactions_add(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}


def buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [el for b in message.get("blocks", []) if b.get("type") == "actions" for el in b["elements"]]


def all_text(message: dict[str, Any]) -> str:
    parts = [message.get("text", "")]
    for b in message.get("blocks", []):
        if isinstance(b.get("text"), dict):
            parts.append(b["text"].get("text", ""))
        for el in b.get("elements", []) if b.get("type") == "context" else []:
            parts.append(el.get("text", ""))
    return "\n".join(parts)
