"""A tiny aiohttp server on 127.0.0.1 with a free port, for the provider fakes."""

from __future__ import annotations

from aiohttp import web


class LocalServer:
    def __init__(self, app: web.Application) -> None:
        self.app = app
        self._runner = web.AppRunner(app)
        self.port = 0

    async def start(self) -> LocalServer:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self) -> None:
        await self._runner.cleanup()
