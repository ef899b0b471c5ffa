"""One MCP server's connection, kept open where the engine runs: started once, its tools listed, pinged,
and reopened when the server dies (a call meanwhile is an ``upstream_error`` observation, never a crash).

The SDK's transports are context managers that must be entered and left in one task, so each server
has a task of its own that owns the session; calls from runs go through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from tools.mcp.servers import McpServerConfig
from tools.tool_errors import UpstreamError

log = logging.getLogger(__name__)

State = Literal["starting", "up", "down", "stopped"]
_PING_S = 10.0
_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
_STOP_S = 5.0


class ConnectionLost(UpstreamError):
    """The connection went while a call was under way (or just before): what was asked may have been done, unlike
    an error the server answered with, which means it was not."""


class McpServer:
    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.state: State = "starting"
        self.error = ""
        self.tools: list[types.Tool] = []
        self.reconnects = 0
        self.changed: set[str] = set()
        self._first_listing: dict[str, str] | None = None
        self._session: ClientSession | None = None
        self._first = asyncio.Event()
        self._broken = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._errlog = open(os.devnull, "w")  # noqa: SIM115 - a server's banners and logs are not ours to show

    def _relisted(self, tools: list[types.Tool]) -> list[types.Tool]:
        """Tools listed again after a reconnect: one whose annotations or schema differ from the first listing (what
        its spec, gate and validation were built from) is marked ``changed`` and not called until a restart reads
        it afresh; a tool new since then is not offered until then either."""
        shapes = {t.name: _shape(t) for t in tools}
        if self._first_listing is None:
            self._first_listing = shapes
            return tools
        changed = {name for name, shape in shapes.items() if self._first_listing.get(name, shape) != shape}
        for name in sorted(changed - self.changed):
            log.warning("MCP server %s now describes its tool %s differently (what it changes, or its arguments): "
                        "not called until OpsPilot restarts and reads it afresh", self.name, name)
        self.changed = changed
        return tools

    @property
    def name(self) -> str:
        return self.config.name

    async def start(self) -> bool:
        """Connect and list the tools; False (with ``error`` set) when it did not come up in time."""
        self._task = asyncio.create_task(self._forever(), name=f"mcp-{self.name}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._first.wait(), self.config.startup_timeout_s)
        if self.state != "up" and not self.error:
            self.error = f"did not answer within {self.config.startup_timeout_s:g}s"
        return self.state == "up"

    async def stop(self) -> None:
        self._stopping = True
        self.state = "stopped"
        if self._task is not None:
            self._task.cancel()
            # Bounded: a cancellation swallowed inside the SDK's transport must not hold shutdown for ever.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait({self._task}, timeout=_STOP_S)
        self._errlog.close()

    def health(self) -> dict[str, Any]:
        return {"state": self.state, "tools": len(self.tools), "reconnects": self.reconnects,
                **({"error": self.error} if self.error and self.state != "up" else {})}

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> types.CallToolResult:
        session = self._session
        if session is None or self.state != "up":
            raise UpstreamError(f"MCP server {self.name!r} is not connected ({self.error or self.state})")
        try:
            async with asyncio.timeout(timeout_s):
                result = await session.call_tool(tool, arguments)
        except TimeoutError:
            raise
        except MCPError as exc:
            self._broken.set()  # the connection may be gone: reopen it
            if exc.code == types.CONNECTION_CLOSED:
                raise ConnectionLost(f"MCP server {self.name!r} closed the connection during the call") from exc
            raise UpstreamError(f"MCP server {self.name!r} failed: {_reason(exc)}") from exc
        except Exception as exc:  # a transport's own error (a dropped HTTP stream): the call may have gone through
            self._broken.set()
            raise ConnectionLost(f"MCP server {self.name!r} failed: {_reason(exc)}") from exc
        if not isinstance(result, types.CallToolResult):
            raise UpstreamError(f"MCP server {self.name!r} answered {type(result).__name__}, not a tool result")
        return result

    async def _forever(self) -> None:
        attempt = 0
        while not self._stopping:
            try:
                async with self._connect() as session:
                    await session.initialize()
                    self.tools = self._relisted(await _list_tools(session))
                    self._session, self.state, self.error = session, "up", ""
                    if attempt:
                        self.reconnects += 1
                        log.warning("MCP server %s reconnected", self.name)
                    attempt = 0
                    self._first.set()
                    await self._watch(session)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self.error = _reason(exc)
            self._session = None
            if self._stopping:
                return
            self.state = "down"
            self._first.set()
            log.warning("MCP server %s is down (%s); reconnecting", self.name, self.error)
            await asyncio.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
            attempt += 1

    async def _watch(self, session: ClientSession) -> None:
        """Return when the connection is gone: a failed call said so, or a ping did not come back."""
        while not self._stopping:
            self._broken.clear()
            with contextlib.suppress(TimeoutError):  # asyncio.timeout: a cancellation is never dropped (wait_for's is)
                async with asyncio.timeout(_PING_S):
                    await self._broken.wait()
            try:
                await asyncio.wait_for(session.send_ping(), 5.0)
            except Exception as exc:
                raise ConnectionError(f"ping failed: {_reason(exc)}") from exc

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[ClientSession]:
        c = self.config
        if c.command is not None:
            env = {**_default_env(), **c.env, **{k: os.environ.get(v, "") for k, v in c.env_from.items()}}
            params = StdioServerParameters(command=c.command, args=list(c.args), env=env, cwd=c.cwd)
            async with stdio_client(params, errlog=self._errlog) as (read, write), \
                    ClientSession(read, write) as session:
                yield session
            return
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        headers = {k: os.environ.get(v, "") for k, v in c.headers_from_env.items()}
        async with httpx2.AsyncClient(headers=headers, timeout=c.timeout_s) as http, \
                streamable_http_client(str(c.url), http_client=http) as (read, write), \
                ClientSession(read, write) as session:
            yield session


def _shape(tool: types.Tool) -> str:
    """What a tool's spec is built from: its annotations (what it changes) and its input schema."""
    hints = tool.annotations.model_dump(mode="json") if tool.annotations else None
    return json.dumps({"annotations": hints, "schema": tool.input_schema}, sort_keys=True, default=str)


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(100):
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _default_env() -> dict[str, str]:
    """What a server inherits from us: enough to run, none of our secrets."""
    keep = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")
    return {k: os.environ[k] for k in keep if k in os.environ}


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _reason(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}"[:300]
