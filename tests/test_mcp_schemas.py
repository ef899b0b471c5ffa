"""An MCP server's tool schema is the server's to write, and is applied in our event loop: a schema naming a
document elsewhere is never fetched (the tool is left out), a pattern that would backtrack for ever is not run
here (its server still checks it), and a schema that cannot be applied refuses the call, not the run."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from mcp import types

from core.messages import ToolCall
from state import MemoryStore
from tools.mcp.servers import McpServerConfig
from tools.mcp.session import McpServer
from tools.mcp.toolset import specs
from tools.registry import Registry, ToolContext
from tools.runtime import execute_one


def server(schemas: dict[str, dict[str, Any]]) -> McpServer:
    s = McpServer(McpServerConfig(name="h", command="unused"))
    s.tools = [types.Tool(name=name, inputSchema=schema, annotations=types.ToolAnnotations(readOnlyHint=True))
               for name, schema in schemas.items()]
    return s


def test_a_schema_naming_a_document_elsewhere_leaves_its_tool_out(caplog: pytest.LogCaptureFixture) -> None:
    remote = {"type": "object", "properties": {"x": {"$ref": "http://127.0.0.1:9/s.json"}}}
    local = {"type": "object", "properties": {"x": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}}
    with caplog.at_level(logging.WARNING):
        names = [s.name for s in specs(server({"remote": remote, "local": local}))]
    assert names == ["h__local"]
    assert "names a document elsewhere" in caplog.text


@pytest.mark.parametrize("pattern", ["^(a+)+$", "^((a+))+$", "^(a|a)+$", "^(a|aa)+$"])
async def test_a_pattern_that_backtracks_for_ever_is_not_run_in_the_loop(pattern: str) -> None:
    """``^(a+)+$`` against 40 a's and a '!' is ~10^12 steps for Python's re, in the event loop's thread, and no
    screen of shapes catches them all (``^(a|a)+$`` passed one): no server pattern is applied here (a value only it
    would refuse goes on to the server); the schema's other keywords still are."""
    hostile = {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern, "maxLength": 100}},
               "required": ["x"], "patternProperties": {pattern: {"type": "string"}}, "additionalProperties": False}
    [spec] = specs(server({"redos": hostile}))
    assert "pattern" not in spec.schema["properties"]["x"] and "patternProperties" not in spec.schema
    ctx = ToolContext(run_id="r", thread_id="t", user_id="U", call_id="c1")

    async def code(x: str) -> str | None:
        call = ToolCall(id="c1", name=spec.name, arguments={"x": x})
        obs = await execute_one(call, registry=Registry.of([spec]), ctx=ctx, journal=MemoryStore().journal)
        assert obs.result is not None
        return obs.result.error_code

    assert await code("b") != "validation_error"  # the pattern alone would refuse it: not judged here
    assert await code("a" * 101) == "validation_error"  # maxLength still is


def test_a_tool_the_server_lists_twice_is_kept_once(caplog: pytest.LogCaptureFixture) -> None:
    """An optional server's odd list stopped OpsPilot from starting ("registered twice")."""
    s = server({"dup": {"type": "object"}})
    s.tools = s.tools * 2
    with caplog.at_level(logging.WARNING):
        assert [spec.name for spec in specs(s)] == ["h__dup"]
    assert "listed twice" in caplog.text
    Registry.of(specs(s))  # registers
