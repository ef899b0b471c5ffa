"""A stdio MCP server without the SDK, speaking JSON-RPC by hand. It lists the tools in the JSON file named by
``RAW_MCP_LISTING`` (read at every listing: a test edits it to play the server's next version), else one change,
``gone``. A call to ``gone`` (or to a tool not listed) is answered with a JSON-RPC error ("Unknown tool"), as a
server does whose tool went away after it was listed: an error answer proves nothing was carried out. A call to
``crash`` ends the process (the client reconnects); any other listed tool is appended to ``RAW_MCP_LOG`` and
answers "done".

Run as ``python tests/fakes/raw_mcp.py``."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

GONE = {"name": "gone", "description": "A change its server no longer has.", "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": False, "destructiveHint": True}}


def listing() -> list[dict[str, Any]]:
    path = os.environ.get("RAW_MCP_LISTING")
    if not path:
        return [GONE]
    with open(path, encoding="utf-8") as file:
        tools: list[dict[str, Any]] = json.load(file)
    return tools


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def call(ident: object, name: str) -> None:
    if name == "crash":
        os._exit(1)
    if name == "gone" or name not in {t["name"] for t in listing()}:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32602, "message": "Unknown tool"}})
        return
    with open(os.environ.get("RAW_MCP_LOG") or os.devnull, "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": name}) + "\n")
    send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "done"}]}})


for line in sys.stdin:
    request = json.loads(line)
    method, ident = request.get("method"), request.get("id")
    if ident is None:
        continue  # a notification
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": ident, "result": {
            "protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "raw", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": listing()}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": ident, "result": {}})
    elif method == "tools/call":
        call(ident, str(request["params"]["name"]))
    else:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no such method"}})
