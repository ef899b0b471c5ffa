"""Typed events the loop emits, in order, each exactly once per run, and the bus that carries them.

``seq`` is per run and continues across pause and resume, so a subscriber can
detect (and a resumed run never produces) a repeated event.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.agent.decisions import DecisionKind
from bot.agent.fallback import Fallback
from core.stops import StopReason
from state.records import call_environment

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
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


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
    data: dict[str, Any] = {}
    """The result's JSON body (``{"ok", "data"}`` or ``{"ok": false, "errorCode", "message"}``): the facts a
    front end says in its own language (``summary`` is English, for logs and traces)."""


class PendingView(BaseModel):
    """What a front end needs to ask a person about one paused call."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    token: str
    interrupt_type: Literal["params_required", "confirm_risky"]
    reason: str
    payload: dict[str, Any]
    arguments: dict[str, Any] = {}
    """The call's arguments as they stand (what will run once answered)."""

    @property
    def environment(self) -> str | None:
        return call_environment(self.payload, self.arguments)


class LoopInterrupt(_Event):
    type: Literal["loop_interrupt"] = "loop_interrupt"
    step: int
    pending: tuple[PendingView, ...]
    requester: str | None = None
    """Who asked for what the run waits on: whoever wrote last in the run (a reply in its thread asks anew)."""


class CallDecided(_Event):
    """A person (or the clock, or Stop) answered a paused call; published before the call runs."""

    type: Literal["call_decided"] = "call_decided"
    call_id: str
    tool: str
    token: str
    decision: DecisionKind
    by: str | None
    values: dict[str, str] = {}
    """What a form was answered with (shown on the closed form)."""
    at: float
    asked_at: float = 0.0
    """When the question was asked (how long the run waited for a person)."""


class RunStalled(_Event):
    """The worker running this turn died; the run was repaired and waits for someone to resume it."""

    type: Literal["run_stalled"] = "run_stalled"
    step: int


class RunFinished(_Event):
    type: Literal["run_finished"] = "run_finished"
    stop_reason: StopReason
    steps: int
    answer: str
    by: str | None = None
    """Who stopped it (a Stop press), when someone did."""
    fallback: Fallback | None = None
    """Set when OpsPilot composed the answer itself (Stop, a limit, a failure): its facts, to say in any language."""
    may_have_changed: bool = True
    """Whether the run called a tool that may change things (or one the registry does not know), by its own trace:
    only then can its answer have changes to list (the audit stream). True where not known."""


Event = Annotated[
    RunStarted | ModelStep | ToolCallEvent | ToolResultEvent | LoopInterrupt | CallDecided | RunStalled | RunFinished,
    Field(discriminator="type"),
]
EventSink = Callable[[Event], Awaitable[None]]
LookaheadSink = Callable[[Event, "Event | None"], Awaitable[None]]
"""A subscriber given, with each event, the same run's next event when it is queued already (else None): it may
leave to that one what only the last of them needs (a front end shows the newest state once)."""
Listener = Callable[[Event], None]


class EventBus:
    """Carries a run's events out of the run's own task.

    * **listeners** (plain functions: counters, recorders; they must not do I/O) are called inline, in order;
    * **subscribers** (coroutines: Slack rendering, the terminal) get each run's events in order from a
      queue per run, in a task of their own — so a slow front end never slows a run, and no front-end
      call is ever made while the run holds its thread's lease.

    A failing listener or subscriber is logged, never fatal to the run.
    """

    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._subscribers: list[_Deliveries] = []

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def subscribe(self, sink: EventSink) -> None:
        async def each(event: Event, _: Event | None) -> None:
            await sink(event)

        self._subscribers.append(_Deliveries(each))

    def subscribe_looking_ahead(self, sink: LookaheadSink) -> None:
        self._subscribers.append(_Deliveries(sink))

    def publish(self, event: Event) -> None:
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                log.exception("event listener failed on %s (run %s)", event.type, event.run_id)
        for deliveries in self._subscribers:
            deliveries.put(event)

    @property
    def quiet(self) -> bool:
        """Nobody listens: a run need not even build its events."""
        return not self._listeners and not self._subscribers

    @property
    def has_subscribers(self) -> bool:
        return bool(self._subscribers)

    def busy(self) -> bool:
        """Whether some subscriber still has events to handle."""
        return any(d.tasks() for d in self._subscribers)

    async def drain(self, *, thread_id: str | None = None) -> None:
        """Wait until every subscriber has handled every event published so far (of one thread, if given)."""
        while tasks := [t for d in self._subscribers for t in d.tasks(thread_id)]:
            await asyncio.wait(tasks)


class _Deliveries:
    """One subscriber's queues: one per run with events in flight, each drained by its own task."""

    def __init__(self, sink: LookaheadSink) -> None:
        self.sink = sink
        self._queues: dict[str, deque[Event]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._threads: dict[str, str] = {}

    def tasks(self, thread_id: str | None = None) -> list[asyncio.Task[None]]:
        return [t for run_id, t in self._tasks.items() if thread_id is None or self._threads[run_id] == thread_id]

    def put(self, event: Event) -> None:
        queue = self._queues.get(event.run_id)
        if queue is None:
            queue = self._queues[event.run_id] = deque()
            self._threads[event.run_id] = event.thread_id
            self._tasks[event.run_id] = asyncio.create_task(self._deliver(event.run_id, queue),
                                                            name=f"events-{event.run_id[:8]}")
        queue.append(event)

    async def _deliver(self, run_id: str, queue: deque[Event]) -> None:
        try:
            while queue:
                event = queue.popleft()
                try:
                    await self.sink(event, queue[0] if queue else None)
                except Exception:
                    log.exception("event subscriber failed on %s (run %s)", event.type, event.run_id)
        finally:
            # Nothing awaits between the empty check and here, so no event can slip in unseen.
            del self._queues[run_id], self._tasks[run_id], self._threads[run_id]


