"""A fault proxy between OpsPilot's processes and the local Slack: what a flaky network or a struggling Slack
does to a Web API call, on the wire. Faults follow :class:`bot.demo.block_limits.Fault` (``lost`` here means Slack
did the work and the connection dropped before its answer arrived; ``reset`` drops it before; ``hang`` answers
only after the caller has given up)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import aiohttp
from aiohttp import web

from bot.demo.block_limits import Fault

HOP_BY_HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")  # Slack's base URL, ending in /api
        self.faults: list[Fault] = []
        self.hits: Counter[str] = Counter()  # what the proxy did, by kind
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    def fault(self, kind: str, *methods: str, for_s: float, rate: float = 1.0, hang_s: float = 30.0) -> Fault:
        fault = Fault(kind, frozenset(methods), time.monotonic() + for_s, hang_s=hang_s, rate=rate)
        self.faults.append(fault)
        return fault

    def quiet_at(self) -> float:
        """The monotonic time after which no fault applies any more."""
        return max((f.until for f in self.faults), default=0.0)

    async def start(self) -> FaultProxy:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        fault = next((f for f in self.faults if f.applies(method)), None)
        kind, status = fault.pick() if fault is not None else ("", 0)
        self.hits[kind or "passed"] += 1
        if kind == "hang":
            await asyncio.sleep(fault.hang_s if fault is not None else 0)
        if kind in ("hang", "error"):
            return web.json_response({"ok": False, "error": "fatal_error"}, status=status)
        if kind == "limited":
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"})
        if kind == "reset":
            return self._drop(request)
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        async with self._session.request(request.method, f"{self.upstream}/{method}", params=request.query,
                                         data=await request.read(), headers=headers) as answer:
            body = await answer.read()
            passed = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP}
        if kind == "lost":  # Slack did it; the caller never hears
            return self._drop(request)
        return web.Response(body=body, status=answer.status, headers=passed)

    @staticmethod
    def _drop(request: web.Request) -> web.Response:
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=500)  # never reaches the caller: the connection is gone
