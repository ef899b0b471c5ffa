"""Processes a benchmark starts beside itself, so that what it measures does not share its event loop:
the Slack stand-in (``python -m bench.processes slack PORT``), a bare Bolt app that only acknowledges
(``python -m bench.processes bare PORT``), and a redis-server the soak stops and starts (:class:`RedisProcess`)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import sys
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.demo.local_server import LocalServer
from bot.demo.workspace import LocalSlack

SECRET = "bench-secret"
TOKEN = "xoxb-test-token"


async def slack(port: int) -> None:
    stand_in = LocalSlack(TOKEN)
    app = web.Application()
    app.router.add_routes(stand_in.routes())
    await LocalServer(app, port=port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


def bare_bolt_app(api_url: str, token: str = TOKEN) -> web.Application:
    """A Bolt app that only acknowledges: the baseline every ack latency is compared with."""
    from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

    bolt = AsyncApp(client=AsyncWebClient(token=token, base_url=api_url), signing_secret=SECRET)

    @bolt.event("app_mention")
    async def noop(event: dict[str, Any]) -> None:
        return None

    @bolt.action(re.compile("."))
    async def ack_only(ack: AsyncAck) -> None:
        await ack()

    async def events(request: web.Request) -> web.Response:
        return await to_aiohttp_response(await bolt.async_dispatch(await to_bolt_request(request)))

    app = web.Application()
    app.router.add_post("/slack/events", events)
    return app


async def bare(port: int, api_url: str) -> None:
    await LocalServer(bare_bolt_app(api_url), port=port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


@dataclass
class RedisProcess:
    """A redis-server the soak stops and starts again (AOF on: what it held survives)."""

    port: int
    workdir: str
    proc: Any = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:  # blocking: call it in a thread (asyncio.to_thread)
        import socket
        import subprocess

        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("the soak needs redis-server (apt-get install redis-server)")
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "yes", "--dir", self.workdir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


if __name__ == "__main__":
    kind, port = sys.argv[1], int(sys.argv[2])
    asyncio.run(slack(port) if kind == "slack" else bare(port, sys.argv[3]))
