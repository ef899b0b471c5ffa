"""A stdio MCP server (the official SDK's) whose changes name their environment in other ways than ours: ``deploy``
takes ``env``, ``rotate_keys`` defaults a missing ``environment`` to prod (unseen by its caller), and
``purge_queue`` calls itself both read-only and destructive; ``slow_deploy`` answers only after ``seconds`` and
``crash_deploy`` exits before it answers (each having done its change), and ``slow_status`` is a read that answers
after ``seconds``. Every call that runs is appended to the file named
by ``DEPLOY_MCP_LOG``, so a test sees what ran, not what was asked.

Run as ``python tests/fakes/deploy_mcp.py``."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("deploy")


def _ran(tool: str, **args: Any) -> dict[str, Any]:
    with open(os.environ["DEPLOY_MCP_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, **args}) + "\n")
    return {"done": tool, **args}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def deploy(service: str, env: str, version: str) -> dict[str, Any]:
    """Deploy a version of a service to an environment."""
    return _ran("deploy", service=service, env=env, version=version)


@server.tool()
def rotate_keys(service: str, environment: str = "prod") -> dict[str, Any]:
    """Rotate a service's API keys (in prod unless told otherwise)."""
    return _ran("rotate_keys", service=service, environment=environment)


@server.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=True))
def purge_queue(queue: str) -> dict[str, Any]:
    """Delete every message in a queue (irreversible)."""
    return _ran("purge_queue", queue=queue)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
async def slow_deploy(service: str, env: str, seconds: float) -> dict[str, Any]:
    """Deploy a service, answering only after ``seconds``."""
    done = _ran("slow_deploy", service=service, env=env)
    await asyncio.sleep(seconds)
    return done


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow_status(service: str, seconds: float) -> dict[str, Any]:
    """A service's status, answered after ``seconds``."""
    await asyncio.sleep(seconds)
    return {"service": service, "status": "ok"}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def crash_deploy(service: str, env: str) -> dict[str, Any]:
    """Deploy a service, then die before answering."""
    _ran("crash_deploy", service=service, env=env)
    os._exit(1)


if __name__ == "__main__":
    server.run("stdio")
