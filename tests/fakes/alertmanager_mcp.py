"""A stdio MCP server (the official SDK's) shaped like ``alertmanager-mcp-server``, which needs Python 3.12: its
tools carry no ``readOnlyHint`` or ``destructiveHint`` — except ``delete_silence`` here, marked destructive
only, so a test sees both an unannotated tool and one the server calls destructive without a read-only hint.

Run as ``python tests/fakes/alertmanager_mcp.py``; the tools answer from memory, no Alertmanager needed."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("alertmanager")
ALERTS: list[dict[str, Any]] = [
    {"labels": {"alertname": "PaymentsHighErrorRate", "service": "payments-api", "severity": "page"},
     "status": {"state": "active"}, "startsAt": "2026-01-01T10:00:00Z"}]
silences: dict[str, dict[str, Any]] = {}


@server.tool()
def get_alerts(active: bool = True) -> dict[str, Any]:
    """Get the alerts Alertmanager holds."""
    return {"alerts": [a for a in ALERTS if a["status"]["state"] == "active" or not active]}


@server.tool()
def post_silence(matchers: list[dict[str, str]], comment: str, duration: str = "1h") -> dict[str, Any]:
    """Create a silence for the alerts its matchers select."""
    silence_id = f"s{len(silences) + 1}"
    silences[silence_id] = {"matchers": matchers, "comment": comment, "duration": duration}
    return {"silenceID": silence_id}


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_silence(silence_id: str) -> dict[str, Any]:
    """Delete a silence."""
    return {"deleted": silences.pop(silence_id, None) is not None}


if __name__ == "__main__":
    server.run("stdio")
