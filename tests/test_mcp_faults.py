"""An MCP server failing under a call, through the real SDK and a stdio server that did its change before it
failed: a change cut off by its timeout or by the connection dropping is ``outcome_unknown`` (it may have been
done: never "failed", which invites doing it twice), while a read cut off stays a plain timeout; a tool name the
providers would refuse is left out, not sent with every request; a server stops promptly after a failed call."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

import pytest
from mcp import types

from core.messages import ToolCall
from state import MemoryStore
from tests.conftest import until
from tests.test_mcp_gate import ROOT, calls, deploy_server
from tools.mcp import McpHub, McpToolRule
from tools.mcp.servers import McpServerConfig
from tools.mcp.session import McpServer
from tools.mcp.toolset import specs
from tools.registry import Registry, ToolContext
from tools.runtime import execute_one


@pytest.fixture
def ran(tmp_path: Path) -> Path:
    log = tmp_path / "ran.jsonl"
    log.touch()
    return log


async def _run(registry: Registry, name: str, **arguments: object) -> tuple[str | None, str]:
    ctx = ToolContext(run_id="r", thread_id="t", user_id="U", call_id="c1")
    obs = await execute_one(ToolCall(id="c1", name=name, arguments=arguments), registry=registry, ctx=ctx,
                            journal=MemoryStore().journal)
    assert obs.result is not None
    return obs.result.error_code, obs.result.content


async def test_a_change_cut_off_after_its_server_did_it_is_an_unknown_outcome(ran: Path) -> None:
    never = {"confirm": "never", "timeout_s": 1.0}
    hub = McpHub([deploy_server(ran, slow_deploy=never, crash_deploy=never, deploy=never)])
    registry = Registry.of(await hub.start())
    try:
        code, said = await _run(registry, "dep__slow_deploy", service="orders", env="staging", seconds=5)
        assert code == "outcome_unknown" and "may or may not" in said
        code, said = await _run(registry, "dep__crash_deploy", service="orders", env="staging")
        assert code == "outcome_unknown" and "may or may not" in said
        assert [c["tool"] for c in calls(ran)] == ["slow_deploy", "crash_deploy"]  # both were done
    finally:
        await hub.stop()


async def test_a_read_cut_off_by_its_timeout_is_a_timeout(ran: Path) -> None:
    hub = McpHub([deploy_server(ran, slow_status={"timeout_s": 1.0})])
    try:
        registry = Registry.of(await hub.start())
        code, said = await _run(registry, "dep__slow_status", service="orders", seconds=5)
        assert code == "timeout" and "did not answer within 1s" in said
    finally:
        await hub.stop()


@pytest.mark.parametrize("name", ["café_status", "状态", "x²", "a" * 70])
def test_a_tool_name_the_providers_refuse_is_left_out(name: str, caplog: pytest.LogCaptureFixture) -> None:
    """Anthropic and OpenAI take ``^[a-zA-Z0-9_-]{1,64}$``: one name outside it made every request a 400."""
    s = McpServer(McpServerConfig(name="h", command="unused"))
    s.tools = [types.Tool(name=n, inputSchema={"type": "object"}, annotations=types.ToolAnnotations(readOnlyHint=True))
               for n in (name, "ok_status")]
    with caplog.at_level(logging.WARNING):
        assert [spec.name for spec in specs(s)] == ["h__ok_status"]
    assert "not a valid tool name" in caplog.text


async def test_an_error_answer_is_a_failure_and_the_server_stops_promptly_after_it() -> None:
    """A JSON-RPC error answer proves the change was not carried out: ``upstream_error``, not an unknown outcome. It
    also marks the connection for a check; a stop right then had its cancellation swallowed by that check's wait,
    and the process hung at shutdown."""
    raw = McpServerConfig(name="raw", command=sys.executable, args=[str(ROOT / "tests/fakes/raw_mcp.py")],
                          tools={"gone": McpToolRule(confirm="never")})
    hub = McpHub([raw])
    registry = Registry.of(await hub.start())
    code, said = await _run(registry, "raw__gone")
    assert code == "upstream_error" and "Unknown tool" in said
    await asyncio.wait_for(hub.stop(), 10)


async def test_a_tool_its_server_describes_differently_after_a_reconnect_is_not_called(tmp_path: Path) -> None:
    """``purge`` was read-only when OpsPilot started; the server came back from a crash calling it destructive. Its
    spec (no card, unattended runs may call it) is the first listing's: it is refused until a restart, not run."""
    def tools(purge: dict[str, bool]) -> str:
        read = {"readOnlyHint": True}
        return json.dumps([{"name": "crash", "inputSchema": {"type": "object"}, "annotations": read},
                           {"name": "purge", "inputSchema": {"type": "object"}, "annotations": purge}])

    listing, log = tmp_path / "tools.json", tmp_path / "ran.jsonl"
    listing.write_text(tools({"readOnlyHint": True}))
    raw = McpServerConfig(name="raw", command=sys.executable, args=[str(ROOT / "tests/fakes/raw_mcp.py")],
                          env={"RAW_MCP_LISTING": str(listing), "RAW_MCP_LOG": str(log)})
    hub = McpHub([raw])
    registry = Registry.of(await hub.start())
    [server] = hub.servers
    try:
        assert (await _run(registry, "raw__purge"))[0] is None  # as it was at start: run
        listing.write_text(tools({"readOnlyHint": False, "destructiveHint": True}))  # the server's next version
        await _run(registry, "raw__crash")
        await until(lambda: server.reconnects == 1 and server.state == "up", 30)
        code, said = await _run(registry, "raw__purge")
        assert code == "upstream_error" and "differently since OpsPilot started" in said
        assert log.read_text().count("purge") == 1  # not run again
    finally:
        await hub.stop()
