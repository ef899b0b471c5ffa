"""A small aiohttp server on 127.0.0.1 (a free port unless one is given): the demo, and the tests' fakes."""

from __future__ import annotations

import ssl

from aiohttp import web


class LocalServer:
    def __init__(self, app: web.Application, *, host: str = "127.0.0.1", port: int = 0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.host = host
        self.ssl_context = ssl_context
        self._runner = web.AppRunner(app)
        self.port = port

    async def start(self) -> LocalServer:
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl_context).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{self.host}:{self.port}"

    async def stop(self) -> None:
        await self._runner.cleanup()
