"""A run as the engine's callers see it: how a turn ended (:class:`RunOutcome`), a paused call as a front end asks
about it (:func:`pending_view`), a decided change as the audit stream keeps it (:func:`audit_entry`), and the short
preview a run record keeps of a text."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from bot.agent.events import PendingView
from core.messages import DECLINED, ToolCall, ToolResultMessage, result_body
from core.stops import StopReason
from state.records import PendingCall, RunRecord


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


def audit_entry(record: RunRecord, call: ToolCall, arguments: dict[str, Any], result: ToolResultMessage,
                decided_by: str | None) -> dict[str, str]:
    """A decided change (run, failed, declined, expired, unknown) as the audit stream keeps it, with the person who
    confirmed it (``approved_by``) or turned it down (``declined_by``). ``rollout``: how a change that was issued
    went, where its tool followed it (``complete``, ``failed``, ``timed_out``, ``unknown``): an issued change is
    "done" only once it was seen through."""
    data = result_body(result.content).get("data") if result.status == "ok" else None
    rollout = data.get("rollout") if isinstance(data, dict) else None
    declined = result.error_code == DECLINED
    return {
        "at": f"{time.time():.3f}", "run_id": record.run_id, "thread_id": record.thread_id,
        "call_id": call.id, "tool": call.name,
        "arguments": json.dumps(arguments or call.arguments, ensure_ascii=False, sort_keys=True),
        "requested_by": record.user_id or "", "approved_by": "" if declined else decided_by or "",
        "declined_by": decided_by or "" if declined else "",
        "status": result.status, "error_code": result.error_code or "", "result": result.content[:500],
        "rollout": rollout if isinstance(rollout, str) else "",
        # what a change with a plan did (revision 3 → 2, replicas 3 → 6): its arguments may not say (the previous
        # revision by default), and the stored result is cut
        "plan": plan[:300] if isinstance(plan := data.get("summary") if isinstance(data, dict) else None, str) else "",
    }
