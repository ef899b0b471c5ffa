"""One model call over a thread: the system prompt and as much of the transcript as fits the context budget,
sent with the tools; a provider that says the context was too long after all is asked once more with less."""

from __future__ import annotations

from collections.abc import Sequence

from bot.agent.deps import RunDeps
from bot.agent.models.base import Completion, ModelError, ToolChoice
from bot.agent.transcript import ThreadMemo, sendable
from core.messages import Message, SystemMessage, UserMessage
from core.outages import outage


async def complete(deps: RunDeps, transcript: Sequence[Message], memo: ThreadMemo, *, turn_start: int, run_id: str,
                   tool_choice: ToolChoice, instruction: str | None = None) -> Completion:
    tools = deps.registry.definitions()
    budget = deps.context_budget_tokens
    for attempt in range(2):
        context = sendable(transcript, memo, turn_start=turn_start, budget=budget, run_id=run_id)
        messages: list[Message] = [SystemMessage(content=deps.system_prompt), *context]
        if instruction:
            messages.append(UserMessage(content=instruction))
        try:
            completion = await deps.model.complete(messages, tools, tool_choice=tool_choice)
            outage("the model").ok()  # if the provider was down, the log says it is back
            return completion
        except ModelError as exc:
            if exc.kind != "context_window_exceeded" or attempt:
                raise
            budget //= 2  # our token estimate was too generous for this model: try once with less
    raise AssertionError("unreachable")
