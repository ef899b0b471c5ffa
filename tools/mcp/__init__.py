"""Tools from MCP servers (``mcp_servers:``), with the official ``mcp`` SDK.

:class:`McpHub` opens every configured server where the engine runs, lists their tools as
:class:`~tools.registry.ToolSpec` (see :mod:`tools.mcp.toolset` for gating), keeps the connections
alive (:mod:`tools.mcp.session`) and reports them for ``/healthz``. A server that does not start is a
warning and its tools are absent — unless it is ``required``, then :class:`McpStartupError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from core.extras import require
from tools.mcp.servers import ConfirmIn, McpServerConfig, McpToolRule
from tools.registry import ToolSpec

if TYPE_CHECKING:
    from tools.mcp.session import McpServer

__all__ = ["ConfirmIn", "McpHub", "McpServerConfig", "McpStartupError", "McpToolRule"]

log = logging.getLogger(__name__)


class _OneLine(logging.Filter):
    """The SDK logs a server's stray stdout line (a banner, a debug print) with its parser's whole traceback: one
    line saying what it was is what an operator needs (the server goes on working)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            record.msg = f"{record.getMessage()} ({type(error).__name__}: {str(error).splitlines()[0][:200]})"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


class McpStartupError(Exception):
    """A server marked ``required`` did not start."""


class McpHub:
    def __init__(self, configs: Sequence[McpServerConfig], *, retried: bool = True) -> None:
        """``retried``: False where the hub is stopped right after its start (``opspilot check``), so a server that
        did not start is not said to be retried."""
        self.retried = retried
        names = [c.name for c in configs]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"mcp_servers: names must be unique ({', '.join(sorted(duplicates))})")
        self.servers: list[McpServer] = []
        if configs:  # the SDK (~0.4 s of imports, the `mcp` extra) only where servers are configured
            require("mcp", "mcp_servers")
            for name in ("mcp.client.stdio", "mcp.client.streamable_http", "mcp.shared.session"):
                sdk = logging.getLogger(name)  # (a logger's filters apply to its own records only)
                if not any(isinstance(f, _OneLine) for f in sdk.filters):
                    sdk.addFilter(_OneLine())
            from tools.mcp.session import McpServer

            self.servers = [McpServer(c) for c in configs]

    async def start(self) -> list[ToolSpec]:
        """Connect every server (concurrently) and return the tools of those that came up."""
        if not self.servers:
            return []
        from tools.mcp.toolset import describe, specs

        up = await asyncio.gather(*(s.start() for s in self.servers))
        tools: list[ToolSpec] = []
        for server, ok in zip(self.servers, up, strict=True):
            if ok:
                found = specs(server)
                log.info("MCP server %s: %d tools (%s)", server.name, len(found), describe(server.config))
                tools += found
                continue
            message = f"MCP server {server.name!r} ({describe(server.config)}) did not start: {server.error}"
            if server.config.required:
                await self.stop()
                raise McpStartupError(message)
            log.warning("%s; its tools are not available%s", message,
                        " (it is retried in the background)" if self.retried else "")
        return tools

    def health(self) -> dict[str, Any]:
        return {s.name: s.health() for s in self.servers}

    async def stop(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.servers))
