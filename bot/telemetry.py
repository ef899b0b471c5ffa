"""Run traces as OpenTelemetry spans, exported over OTLP/HTTP when an endpoint is configured
(``telemetry.otlp_endpoint`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``). Off by default: then nothing here is
imported or called.

Built from the engine's events (a listener: in-memory span bookkeeping only; export happens in the SDK's
batch thread), with the GenAI semantic conventions:

* ``invoke_agent opspilot`` — a run (thread id, run id, requester, stop reason). Its trace id and span id
  are derived from the run id, so the process that resumes a paused run continues the same trace: the
  resumed stretch is a child span of the run, linked to it;
* ``chat <model>`` — each model call (provider, model, input/output tokens, latency);
* ``execute_tool <tool>`` — each tool call (name, call id, status, error code; arguments and results only
  with ``telemetry.capture_content``, and then scrubbed);
* ``await_person <tool>`` — the wait for a person's answer to a question (decision, who).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from bot.agent.events import Event
from core.redact import redact

log = logging.getLogger(__name__)

_NS = 1_000_000_000


def run_context(run_id: str) -> SpanContext:
    """The run's own span context, the same in every process: its trace continues wherever it resumes."""
    digest = hashlib.sha256(run_id.encode()).digest()
    return SpanContext(trace_id=int.from_bytes(digest[:16], "big") or 1,
                       span_id=int.from_bytes(digest[16:24], "big") or 1, is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))


class _RunIds(RandomIdGenerator):
    """Random ids, except for a run's first span, which takes the run's own ids (see :func:`run_context`)."""

    def __init__(self) -> None:
        self.pinned: SpanContext | None = None

    def generate_trace_id(self) -> int:
        return self.pinned.trace_id if self.pinned is not None else super().generate_trace_id()

    def generate_span_id(self) -> int:
        if self.pinned is not None:
            span_id, self.pinned = self.pinned.span_id, None
            return span_id
        return super().generate_span_id()


@dataclass
class _Stretch:
    span: Span
    run_id: str


class Telemetry:
    def __init__(self, exporter: SpanExporter, *, provider_name: str, model_name: str, capture_content: bool = False,
                 batch: bool = True, service_name: str = "opspilot") -> None:
        self.provider_name = provider_name
        self.model_name = model_name
        self.capture_content = capture_content
        self._ids = _RunIds()
        processor: SpanProcessor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}),
                                       id_generator=self._ids, shutdown_on_exit=False)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("opspilot")
        self._runs: dict[str, _Stretch] = {}  # the stretch of each run working in this process
        self._calls: dict[str, dict[str, Any]] = {}  # call id -> arguments (captured content only)

    # --- events -------------------------------------------------------------------------------------------

    def observe(self, event: Event) -> None:
        try:
            self._observe(event)
        except Exception:  # tracing never breaks a run
            log.exception("telemetry: %s of run %s not traced", event.type, event.run_id)

    def _observe(self, event: Event) -> None:
        if event.type == "run_started":
            self._ids.pinned = run_context(event.run_id)
            try:
                span = self.tracer.start_span("invoke_agent opspilot", kind=SpanKind.INTERNAL, attributes={
                    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "opspilot",
                    "gen_ai.conversation.id": event.thread_id, "opspilot.run_id": event.run_id,
                    "enduser.id": event.user_id or ""})
            finally:
                self._ids.pinned = None  # only this span takes the run's ids
            self._runs[event.run_id] = _Stretch(span, event.run_id)
            return
        stretch = self._stretch(event)
        parent = trace.set_span_in_context(stretch.span)
        now = time.time_ns()
        if event.type == "model_step":
            span = self.tracer.start_span(f"chat {self.model_name}", context=parent, kind=SpanKind.CLIENT,
                                          start_time=now - int(event.latency_ms * 1e6), attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.provider.name": self.provider_name,
                    "gen_ai.request.model": self.model_name, "gen_ai.usage.input_tokens": event.input_tokens,
                    "gen_ai.usage.output_tokens": event.output_tokens, "gen_ai.response.finish_reasons": [event.stop],
                    "gen_ai.usage.cache_read.input_tokens": event.cache_read_tokens,
                    "gen_ai.usage.cache_creation.input_tokens": event.cache_write_tokens,
                    "opspilot.step": event.step, "opspilot.latency_ms": event.latency_ms})
            span.end(now)
        elif event.type == "tool_call" and self.capture_content:
            self._calls[event.call_id] = event.arguments
        elif event.type == "tool_result":
            attributes: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.tool,
                "gen_ai.tool.call.id": event.call_id, "opspilot.tool.status": event.status,
                "opspilot.latency_ms": event.latency_ms}
            if event.error_code:
                attributes["error.type"] = event.error_code
            if self.capture_content:
                attributes["gen_ai.tool.call.arguments"] = redact(json.dumps(self._calls.pop(event.call_id, {}),
                                                                             ensure_ascii=False))
                attributes["gen_ai.tool.call.result"] = redact(event.summary)
            span = self.tracer.start_span(f"execute_tool {event.tool}", context=parent, kind=SpanKind.INTERNAL,
                                          start_time=now - int(event.latency_ms * 1e6), attributes=attributes)
            if event.status not in ("ok", "interrupted"):
                span.set_status(Status(StatusCode.ERROR, event.error_code or event.status))
            span.end(now)
        elif event.type == "call_decided":
            span = self.tracer.start_span(f"await_person {event.tool}", context=parent, kind=SpanKind.INTERNAL,
                                          start_time=int((event.asked_at or event.at) * _NS), attributes={
                    "opspilot.decision": event.decision, "opspilot.decided_by": event.by or "",
                    "gen_ai.tool.call.id": event.call_id})
            span.end(int(event.at * _NS))
        elif event.type in ("loop_interrupt", "run_stalled", "run_finished"):
            if event.type == "run_finished":
                stretch.span.set_attribute("opspilot.stop_reason", event.stop_reason)
                stretch.span.set_attribute("opspilot.steps", event.steps)
                if event.stop_reason not in ("final_answer",):
                    stretch.span.set_status(Status(StatusCode.ERROR, event.stop_reason))
            else:
                stretch.span.set_attribute("opspilot.paused", event.type)
            stretch.span.end()
            del self._runs[event.run_id]  # it may go on anywhere: a new stretch then

    def _stretch(self, event: Event) -> _Stretch:
        """The span of the run's work in this process; a new one, in the run's trace, after a pause."""
        stretch = self._runs.get(event.run_id)
        if stretch is None:
            root = run_context(event.run_id)
            span = self.tracer.start_span(
                "invoke_agent opspilot (resumed)", context=trace.set_span_in_context(trace.NonRecordingSpan(root)),
                links=[Link(root)], attributes={
                    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "opspilot",
                    "gen_ai.conversation.id": event.thread_id, "opspilot.run_id": event.run_id,
                    "opspilot.resumed": True})
            stretch = self._runs[event.run_id] = _Stretch(span, event.run_id)
        return stretch

    def shutdown(self) -> None:
        """Flush what is pending (blocking: call it in a thread)."""
        self.provider.force_flush(5000)
        self.provider.shutdown()


def otlp(endpoint: str | None) -> SpanExporter:
    """The OTLP/HTTP exporter: ``endpoint`` is a base URL like ``OTEL_EXPORTER_OTLP_ENDPOINT`` (traces go to its
    ``/v1/traces``); None: the SDK reads the standard environment variables."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if endpoint:
        return OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    return OTLPSpanExporter()
