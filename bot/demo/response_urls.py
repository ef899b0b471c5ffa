"""The local Slack's response URLs (a mixin of :class:`bot.demo.workspace.LocalSlack`), as Slack's interactivity
guide describes them: every click's payload carries one, tied to the message clicked; a POST with
``replace_original: true`` edits that message and ``delete_original: true`` removes it, anything else is a reply
(``ephemeral`` unless ``response_type`` says ``in_channel``). A URL serves 5 uses within 30 minutes, then answers
404 ``used_url`` / ``expired_url``. The Web API's fault switches apply here too, as method ``response_url``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from bot.demo.block_limits import Fault, block_problems
from bot.demo.local_server import LocalServer

USES = 5
LIFETIME_S = 30 * 60


class ResponseMethods:
    messages: dict[tuple[str, str], dict[str, Any]]
    responses: list[dict[str, Any]]
    """Everything posted to a response URL, in order (replies and edits alike)."""
    faults: list[Fault]
    server: LocalServer
    _response_urls: dict[str, dict[str, Any]]

    async def _announce(self, change: dict[str, Any]) -> None:
        raise NotImplementedError

    def response_url(self, channel: str | None = None, ts: str | None = None, *, base_url: str | None = None) -> str:
        """A new response URL, as Slack puts in an interaction's payload: for the message ``channel``/``ts`` when
        the interaction came from one (a click), else for replies only (a slash command). ``base_url``: where
        these routes are served when not on this fake's own server (the demo)."""
        url_id = str(len(self._response_urls) + 1)
        self._response_urls[url_id] = {"channel": channel, "ts": ts, "uses": 0, "at": time.monotonic()}
        return f"{base_url or self.server.url}/response/{url_id}"

    async def _response(self, request: web.Request) -> web.Response:
        url = self._response_urls.get(request.match_info["id"])
        if url is None:
            return web.Response(status=404, text="invalid_url")
        fault = next((f for f in self.faults if f.applies("response_url")), None)
        kind, status = fault.pick() if fault is not None else ("", 0)
        if fault is not None:
            fault.times -= 1
            if kind != "lost":
                return await _failed(request, fault, kind, status)
        url["uses"] += 1
        if url["uses"] > USES:
            return web.Response(status=404, text="used_url")
        if time.monotonic() - url["at"] > LIFETIME_S:
            return web.Response(status=404, text="expired_url")
        try:
            body = await request.json()
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        self.responses.append(body)
        problem = await self._respond_with(url, body)
        if problem:
            return web.Response(status=400, text=problem)
        if kind == "lost":  # done, and the answer never reaches the caller
            return web.Response(status=status, text="fatal_error")
        return web.json_response({"ok": True})

    async def _respond_with(self, url: dict[str, Any], body: dict[str, Any]) -> str:
        """What a POST does: edit or remove the clicked message, or nothing here (a reply: kept in ``responses``)."""
        if not (body.get("replace_original") or body.get("delete_original")):
            return ""
        message = self.messages.get((str(url["channel"]), str(url["ts"])))
        if message is None:
            return "message_not_found"
        if body.get("delete_original"):
            self.messages.pop((message["channel"], message["ts"]))
            await self._announce({"type": "deleted", "channel": message["channel"], "ts": message["ts"]})
            return ""
        blocks = body.get("blocks") or []
        if not blocks and not body.get("text"):
            return "no_text"
        if problems := block_problems(blocks):
            return "invalid_blocks: " + "; ".join(problems)
        message.update(text=str(body.get("text") or ""), blocks=blocks, edits=message["edits"] + 1)
        await self._announce({"type": "message", "message": message})
        return ""


async def _failed(request: web.Request, fault: Fault, kind: str, status: int) -> web.Response:
    """A fault's answer, as the Web API's (see :class:`bot.demo.block_limits.Fault`), without doing anything."""
    if kind == "hang":
        await asyncio.sleep(fault.hang_s)
    if kind == "reset" and request.transport is not None:
        request.transport.abort()
    if kind == "limited":
        return web.Response(status=429, text="rate_limited", headers={"Retry-After": "1"})
    if kind == "refuse":
        return web.Response(status=404, text=fault.error)
    return web.Response(status=status or 500, text="fatal_error")
