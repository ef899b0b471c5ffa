"""OpenTelemetry traces of runs: GenAI semantic conventions, a resumed run continuing its trace in another
process, content only when asked for (scrubbed), and OTLP/HTTP as a real receiver decodes it."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bot.agent.decisions import Confirm
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.assembly import tracing
from bot.config import Settings
from bot.demo.local_server import LocalServer
from bot.telemetry import Telemetry, run_context
from state import RedisStore
from tests.conftest import make_harness
from tests.toolkit import Probe, toolkit


def traced(model: ScriptedModel, store: RedisStore, specs: list[Any], *, capture: bool = False) -> tuple[Any, Any]:
    exporter = InMemorySpanExporter()
    harness = make_harness(model, store, specs)
    harness.engine.deps.bus.listen(Telemetry(exporter, provider_name="anthropic", model_name="claude-test",
                                             capture_content=capture, batch=False).observe)
    return harness, exporter


def by_name(spans: Any, name: str) -> list[Any]:
    return [s for s in spans if s.name == name]


async def test_a_paused_run_resumed_in_another_process_is_one_trace(store: RedisStore) -> None:
    tools = toolkit(Probe())
    specs = [tools["lookup_a"], tools["broken"], tools["change"]]
    first, spans_a = traced(ScriptedModel([reply("", call("lookup_a", "a1"), call("broken", "x1")),
                                           reply("", call("change", "c1", target="db", environment="prod"))]),
                            store, specs)
    paused = await first.engine.ask("t-otel", "fix the db", user_id="U_REQ")
    assert paused.status == "paused"
    a = spans_a.get_finished_spans()
    [root] = by_name(a, "invoke_agent opspilot")
    expected = run_context(paused.run_id)
    assert (root.context.trace_id, root.context.span_id) == (expected.trace_id, expected.span_id)
    assert root.attributes["opspilot.run_id"] == paused.run_id and root.attributes["enduser.id"] == "U_REQ"
    assert root.attributes["gen_ai.conversation.id"] == "t-otel"
    chats = by_name(a, "chat claude-test")
    assert len(chats) == 2 and all(c.parent.span_id == root.context.span_id for c in chats)
    assert chats[0].attributes["gen_ai.provider.name"] == "anthropic"
    assert chats[0].attributes["gen_ai.usage.input_tokens"] > 0 and "gen_ai.usage.output_tokens" in chats[0].attributes
    assert chats[0].end_time > chats[0].start_time
    [ok] = by_name(a, "execute_tool lookup_a")
    assert ok.attributes["gen_ai.tool.call.id"] == "a1" and ok.attributes["opspilot.tool.status"] == "ok"
    [failed] = by_name(a, "execute_tool broken")
    assert failed.attributes["error.type"] == "internal_error" and failed.status.is_ok is False
    assert "gen_ai.tool.call.arguments" not in ok.attributes  # no content unless asked for
    assert "hunter2" not in str([s.attributes for s in a])

    # Another process (its own engine, bus and tracer) takes the Confirm and finishes the run.
    second, spans_b = traced(ScriptedModel([reply("Done: db changed.")]), store, specs)
    await second.engine.resume_token(paused.pending[0].token, Confirm(), by="U_APPROVER")
    b = spans_b.get_finished_spans()
    [resumed] = by_name(b, "invoke_agent opspilot (resumed)")
    assert resumed.context.trace_id == root.context.trace_id  # the same trace
    assert resumed.parent.span_id == root.context.span_id and resumed.links[0].context.span_id == root.context.span_id
    assert resumed.attributes["opspilot.stop_reason"] == "final_answer"
    [wait] = by_name(b, "await_person change")
    assert wait.attributes["opspilot.decision"] == "confirmed"
    assert wait.attributes["opspilot.decided_by"] == "U_APPROVER"
    assert wait.start_time < wait.end_time and wait.parent.span_id == resumed.context.span_id
    [change] = by_name(b, "execute_tool change")
    assert change.attributes["opspilot.tool.status"] == "ok" and change.context.trace_id == root.context.trace_id


async def test_content_only_when_asked_and_then_scrubbed(store: RedisStore) -> None:
    tools = toolkit(Probe())
    harness, spans = traced(ScriptedModel([reply("", call("lookup_a", "a1", q="db password=hunter2")),
                                           reply("ok")]), store, [tools["lookup_a"]], capture=True)
    await harness.engine.ask("t-otel-2", "look", user_id="U1")
    [span] = by_name(spans.get_finished_spans(), "execute_tool lookup_a")
    arguments = str(span.attributes["gen_ai.tool.call.arguments"])
    assert "hunter2" not in arguments and "password" in arguments
    assert "gen_ai.tool.call.result" in span.attributes


async def test_spans_reach_an_otlp_http_receiver(store: RedisStore) -> None:
    received: list[ExportTraceServiceRequest] = []

    async def traces(request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        received.append(message)
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    server = await LocalServer(app).start()
    try:
        settings = Settings(telemetry={"otlp_endpoint": server.url, "service_name": "opspilot-test"})
        model = ScriptedModel([reply("", call("lookup_a", "a1")), reply("fine")])
        telemetry = tracing(settings, model)
        assert telemetry is not None
        harness = make_harness(model, store, [toolkit(Probe())["lookup_a"]])
        harness.engine.deps.bus.listen(telemetry.observe)
        outcome = await harness.engine.ask("t-otel-3", "look", user_id="U1")
        await asyncio.to_thread(telemetry.shutdown)  # the batch exporter sends what it holds
        spans = [(s, rs.resource) for m in received for rs in m.resource_spans for ss in rs.scope_spans
                 for s in ss.spans]
        names = {s.name for s, _ in spans}
        assert {"invoke_agent opspilot", "chat demo", "execute_tool lookup_a"} <= names, names
        root = next(s for s, _ in spans if s.name == "invoke_agent opspilot")
        attributes = {a.key: a.value for a in root.attributes}
        assert attributes["opspilot.run_id"].string_value == outcome.run_id
        assert attributes["opspilot.stop_reason"].string_value == "final_answer"
        assert root.trace_id == run_context(outcome.run_id).trace_id.to_bytes(16, "big")
        service = {a.key: a.value.string_value for a in spans[0][1].attributes}["service.name"]
        assert service == "opspilot-test"
    finally:
        await server.stop()


def test_off_by_default(monkeypatch: Any) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert tracing(Settings(), ScriptedModel([])) is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    telemetry = tracing(Settings(), ScriptedModel([]))
    assert telemetry is not None and telemetry.model_name == "demo"
    telemetry.provider.shutdown()
