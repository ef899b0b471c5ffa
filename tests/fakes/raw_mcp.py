"""A stdio MCP server without the SDK, speaking JSON-RPC by hand: it lists one change, ``gone``, and answers every
call with a JSON-RPC error ("Unknown tool"), as a server does whose tool went away after it was listed. An error
response proves the call was not carried out (unlike a connection that drops).

Run as ``python tests/fakes/raw_mcp.py``."""

from __future__ import annotations

import json
import sys

GONE = {"name": "gone", "description": "A change its server no longer has.", "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": False, "destructiveHint": True}}


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


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
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": [GONE]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": ident, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32602, "message": "Unknown tool"}})
