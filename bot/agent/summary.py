"""What ran in a run, in words, from the transcript alone: the answer when the model cannot summarise (a limit
stopped the run, the model failed, someone pressed Stop)."""

from __future__ import annotations

from core.messages import AssistantMessage, Message, ToolResultMessage, UserMessage

_TARGET_KEYS = ("service_id", "service", "target", "environment")


def what_ran(transcript: list[Message]) -> str:
    """Each call of the latest turn (not earlier turns) with its target and outcome, and a warning for every
    change whose outcome is unknown."""
    start = max((i for i, m in enumerate(transcript) if isinstance(m, UserMessage)), default=-1)
    mine = transcript[start + 1:]
    calls = {c.id: c for m in mine if isinstance(m, AssistantMessage) for c in m.tool_calls}
    lines, unknown = [], []
    for m in mine:
        if isinstance(m, ToolResultMessage):
            call = calls.get(m.call_id)
            target = "/".join(str(call.arguments[k]) for k in _TARGET_KEYS if call and call.arguments.get(k))
            lines.append(f"• `{m.name}`{f' on {target}' if target else ''}: {_in_words(m)}")
            if m.error_code == "outcome_unknown":
                unknown.append(m)
    done = "\n".join(lines[-10:]) if lines else "• no tool calls completed"
    warnings = "".join(f"\n:warning: `{m.name}` was started and may or may not have completed: check its "
                       "effect before retrying." for m in unknown)
    return f"What ran:\n{done}{warnings}\nAsk me to continue, or narrow the question."


def _in_words(result: ToolResultMessage) -> str:
    if result.status == "ok":
        return "done"
    if result.error_code == "outcome_unknown":
        return "started, outcome unknown"
    if result.status == "cancelled":  # waiting for a person when stopped, or under way
        return "not started" if "nothing was run" in result.content else "stopped before it finished"
    if result.error_code == "declined_by_user":
        return "declined"
    return f"failed ({result.error_code})" if result.status == "error" else str(result.status)
