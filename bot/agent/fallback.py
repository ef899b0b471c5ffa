"""What ran in a run, from the transcript alone: the answer when the model cannot summarise (a limit stopped the run,
the model failed, someone pressed Stop).

Kept as facts (:class:`Ran`, :class:`Fallback`) that a front end says in the thread's language; the English text
here is what the transcript keeps, for the model to read on the next turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from core.messages import AssistantMessage, Message, ToolResultMessage, UserMessage, result_body
from core.stops import STOP_WORDING, StopReason

_TARGET_KEYS = ("service_id", "service", "target", "environment")

Outcome = Literal["done", "unknown", "not_started", "stopped", "declined", "expired", "failed", "issued", "other"]


class Ran(BaseModel):
    """One call of the run and how it ended (``code``: the error code, the rollout of an ``issued`` change not seen
    through, or the status for ``other``)."""

    model_config = ConfigDict(frozen=True)

    tool: str
    target: str = ""
    outcome: Outcome
    code: str = ""


class Fallback(BaseModel):
    """An answer OpsPilot composed itself: why the run ended without the model's own, then what ran.
    ``summary``: the model's summary when it wrote one after a limit ('' when it could not)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["stopped", "early", "failed"]
    reason: StopReason
    at: str = ""
    why: str = ""
    code: str = ""
    """Which failure ``why`` is (a model error's kind, ``internal_error``, ``worker_lost``), for front ends to say it
    in the thread's language; ``why`` is its English (the transcript's), with any reference or status in it."""
    summary: str = ""
    ran: tuple[Ran, ...] = ()

    def english(self) -> str:
        head = {"stopped": f"_Stopped at {self.at}._",
                "early": f"_Stopped early: {STOP_WORDING[self.reason].because}._",
                "failed": f"_I could not finish: {self.why}._"}[self.kind]
        return f"{head}\n\n{self.summary or in_english(self.ran)}"


def ran(transcript: list[Message]) -> tuple[Ran, ...]:
    """Each call of the latest turn (not earlier turns) with its target and outcome; the last ten."""
    start = max((i for i, m in enumerate(transcript) if isinstance(m, UserMessage)), default=-1)
    mine = transcript[start + 1:]
    calls = {c.id: c for m in mine if isinstance(m, AssistantMessage) for c in m.tool_calls}
    out = []
    for m in mine:
        if isinstance(m, ToolResultMessage):
            call = calls.get(m.call_id)
            target = "/".join(str(call.arguments[k]) for k in _TARGET_KEYS if call and call.arguments.get(k))
            out.append(Ran(tool=m.name, target=target, **_outcome(m)))
    return tuple(out[-10:])


def what_ran(transcript: list[Message]) -> str:
    return in_english(ran(transcript))


def in_english(calls: Sequence[Ran]) -> str:
    """Each call with its outcome, and a warning for every change whose outcome is unknown."""
    words = {"done": "done", "unknown": "started, outcome unknown", "not_started": "not started",
             "stopped": "stopped before it finished", "declined": "declined", "expired": "expired: not run"}
    lines = [f"• `{c.tool}`{f' on {c.target}' if c.target else ''}: "
             + (words.get(c.outcome) or (f"failed ({c.code})" if c.outcome == "failed" else
                                         f"issued, rollout {c.code}: not verified" if c.outcome == "issued" else
                                         c.code)) for c in calls]
    done = "\n".join(lines) if lines else "• no tool calls completed"
    warnings = "".join(f"\n:warning: `{c.tool}` was started and may or may not have completed: check its "
                       "effect before retrying." for c in calls if c.outcome == "unknown")
    return f"What ran:\n{done}{warnings}\nAsk me to continue, or narrow the question."


def _outcome(result: ToolResultMessage) -> dict[str, str]:
    if result.status == "ok":  # a change whose rollout its tool followed is done once that completed
        data = result_body(result.content).get("data")
        rollout = data.get("rollout") if isinstance(data, dict) else None
        return {"outcome": "issued", "code": rollout} if isinstance(rollout, str) and rollout != "complete" else \
            {"outcome": "done"}
    if result.error_code == "outcome_unknown":
        return {"outcome": "unknown"}
    if result.status == "expired":  # nobody answered its question: it never started
        return {"outcome": "expired"}
    if result.status == "cancelled":  # waiting for a person when stopped, or under way
        return {"outcome": "not_started" if "nothing was run" in result.content else "stopped"}
    if result.error_code == "declined_by_user":
        return {"outcome": "declined"}
    if result.status == "error":
        return {"outcome": "failed", "code": str(result.error_code)}
    return {"outcome": "other", "code": str(result.status)}
