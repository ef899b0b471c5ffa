"""Typed events the loop emits, in order, each exactly once per run.

``seq`` is per run and continues across pause and resume, so a subscriber can
detect (and a resumed run never produces) a repeated event.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.stops import StopReason

log = logging.getLogger(__name__)



class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    thread_id: str
    seq: int


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    user_id: str | None
    text: str


class ModelStep(_Event):
    type: Literal["model_step"] = "model_step"
    step: int
    latency_ms: float
    asked_for_tools: bool
    stop: str
    text: str = ""


class ToolCallEvent(_Event):
    type: Literal["tool_call"] = "tool_call"
    step: int
    call_id: str
    tool: str
    arguments: dict[str, Any]
    mutating: bool


class ToolResultEvent(_Event):
    type: Literal["tool_result"] = "tool_result"
    step: int
    call_id: str
    tool: str
    status: str
    error_code: str | None
    summary: str
    latency_ms: float


class PendingView(BaseModel):
    """What a front end needs to ask a person about one paused call."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    token: str
    interrupt_type: Literal["params_required", "confirm_risky"]
    reason: str
    payload: dict[str, Any]


class LoopInterrupt(_Event):
    type: Literal["loop_interrupt"] = "loop_interrupt"
    step: int
    pending: tuple[PendingView, ...]


class RunFinished(_Event):
    type: Literal["run_finished"] = "run_finished"
    stop_reason: StopReason
    steps: int
    answer: str


Event = Annotated[
    RunStarted | ModelStep | ToolCallEvent | ToolResultEvent | LoopInterrupt | RunFinished,
    Field(discriminator="type"),
]
EventSink = Callable[[Event], Awaitable[None]]


class EventBus:
    """Fans events out to subscribers; a failing subscriber is logged, never fatal to the run."""

    def __init__(self, subscribers: Sequence[EventSink] = ()) -> None:
        self._subscribers = list(subscribers)

    def subscribe(self, sink: EventSink) -> None:
        self._subscribers.append(sink)

    async def publish(self, event: Event) -> None:
        for sink in self._subscribers:
            try:
                await sink(event)
            except Exception:
                log.exception("event subscriber failed on %s (run %s)", event.type, event.run_id)
