"""A run as the engine's callers see it: how a turn ended (:class:`RunOutcome`), a paused call as a front end asks
about it (:func:`pending_view`), and the short preview a run record keeps of a text."""

from __future__ import annotations

from dataclasses import dataclass

from bot.agent.events import PendingView
from core.stops import StopReason
from state.records import PendingCall


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    thread_id: str
    status: str
    stop_reason: StopReason | None
    answer: str
    pending: tuple[PendingView, ...] = ()


def preview(text: str, limit: int = 200) -> str:
    """What run records keep of texts that live in full in the transcript."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pending_view(p: PendingCall) -> PendingView:
    return PendingView(call_id=p.call.id, tool=p.call.name, token=p.token, interrupt_type=p.interrupt_type,
                       reason=p.reason, payload=p.payload, arguments=p.arguments)
