"""Process metrics in the Prometheus text format (``GET /metrics``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from bot.agent.events import Event
from core.messages import DECLINED

_HELP = {
    "opspilot_runs_total": "Runs started",
    "opspilot_steps_total": "Model steps",
    "opspilot_model_tokens_total": "Model tokens by kind: input (full price), cache_read, cache_write, output",
    "opspilot_tool_calls_total": "Tool results by status",
    "opspilot_runs_finished_total": "Finished runs by stop reason",
    "opspilot_interrupts_total": "Questions asked to a person",
    "opspilot_interrupts_resolved_total": "Questions resolved, by how",
    "opspilot_slack_api_errors_total": "Slack Web API errors by method",
    "opspilot_slack_rate_limited_total": "Slack Web API 429 responses",
    "opspilot_work_dead_letters": "Work items set aside after every try failed (opspilot stats lists them)",
    "opspilot_work_retries_total": "Work items tried again after a failure, by kind",
    "opspilot_feedback_total": "Answers rated, by the model that wrote them and the rating (up, down)",
    "opspilot_runs_refused_total": "Starts refused by the run limits, by door and scope (person, channel)",
    "opspilot_requests_refused_total": "Slack requests refused before any work, by the HTTP status answered",
    "opspilot_outbox_retries_total": "Outbox deliveries tried again after a failure",
    "opspilot_outbox_dropped_total": "Outbox messages given up (Slack refused them for good)",
    "opspilot_outbox_duplicates_avoided_total": "Posts found already made after a lost reply (not posted again)",
    "opspilot_streams_started_total": "Progress streams started",
    "opspilot_streams_found_total": "Streams found already started after a lost reply",
    "opspilot_streams_strays_stopped_total": "Streams left open by a stopped process, stopped",
    "opspilot_stream_fallbacks_total": "Progress shown as plain messages instead of a stream, by reason",
    "opspilot_interrupts_pending": "Runs waiting for a person now",
    "opspilot_outbox_threads_undelivered": "Threads with a message still to deliver",
    "opspilot_work_queue_length": "Work items in the queue",
    "opspilot_work_pending": "Work items taken by a worker and not yet done",
    "opspilot_work_oldest_pending_seconds": "Age of the oldest work item taken and not yet done",
    "opspilot_work_redelivered_pending": "Work items taken more than once (their worker died) and not yet done",
}


class Metrics:
    def __init__(self) -> None:
        self.counters: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()

    def inc(self, name: str, n: int = 1, **labels: str) -> None:
        self.counters[(name, tuple(sorted(labels.items())))] += n

    def value(self, name: str, **labels: str) -> int:
        return self.counters[(name, tuple(sorted(labels.items())))]

    def observe(self, event: Event) -> None:
        """Listens to the engine's events (inline: counting does no I/O)."""
        if event.type == "run_started":
            self.inc("opspilot_runs_total")
        elif event.type == "model_step":
            self.inc("opspilot_steps_total")
            for kind, n in (("input", event.input_tokens), ("cache_read", event.cache_read_tokens),
                            ("cache_write", event.cache_write_tokens), ("output", event.output_tokens)):
                if n:
                    self.inc("opspilot_model_tokens_total", n, kind=kind)
        elif event.type == "tool_result":
            declined = event.error_code == DECLINED  # a person's no, not a failure
            self.inc("opspilot_tool_calls_total", status="declined" if declined else event.status)
            if event.status == "expired":
                self.inc("opspilot_interrupts_resolved_total", how="expired")
        elif event.type == "loop_interrupt":
            self.inc("opspilot_interrupts_total", len(event.pending))
        elif event.type == "run_finished":
            self.inc("opspilot_runs_finished_total", reason=event.stop_reason)

    def render(self, gauges: Iterable[tuple[str, float]] = ()) -> str:
        lines: list[str] = []
        seen: set[str] = set()
        rows: list[tuple[str, Any, float]] = [(n, labels, v) for (n, labels), v in sorted(self.counters.items())]
        rows += [(n, (), v) for n, v in gauges]
        for name, labels, value in rows:
            if name not in seen:
                seen.add(name)
                kind = "counter" if name.endswith("_total") else "gauge"
                lines += [f"# HELP {name} {_HELP.get(name, name)}", f"# TYPE {name} {kind}"]
            label_text = ",".join(f'{k}="{v}"' for k, v in labels)
            lines.append(f"{name}{{{label_text}}} {value:g}" if label_text else f"{name} {value:g}")
        return "\n".join(lines) + "\n"


class CountingRateLimitHandler(AsyncRateLimitErrorRetryHandler):
    """Honours Slack's 429 Retry-After (slack-sdk's handler) and counts each one."""

    def __init__(self, metrics: Metrics, max_retry_count: int = 5) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.metrics = metrics

    async def _can_retry_async(self, *, state: RetryState, request: HttpRequest,
                               response: HttpResponse | None = None, error: Exception | None = None) -> bool:
        limited = await super()._can_retry_async(state=state, request=request, response=response, error=error)
        if limited:
            self.metrics.inc("opspilot_slack_rate_limited_total")
        return limited


def retry_handlers(metrics: Metrics) -> list[AsyncRetryHandler]:
    from slack_sdk.http_retry.builtin_async_handlers import (
        AsyncConnectionErrorRetryHandler,
        AsyncServerErrorRetryHandler,
    )

    return [AsyncConnectionErrorRetryHandler(), CountingRateLimitHandler(metrics), AsyncServerErrorRetryHandler()]
