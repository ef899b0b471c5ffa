"""A deterministic model for tests and the offline demo. Always labelled as scripted.

It enforces the same pairing rule the real providers do, so a protocol slip in the
loop fails here exactly as it would fail against a real API.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.agent.models.base import AUTO, Completion, ModelError, ToolChoice, Usage
from bot.agent.models.convert import completion
from bot.agent.transcript import estimate_tokens, repair
from core.messages import AssistantMessage, Message, ToolCall
from tools.registry import ToolDefinition

Reply = AssistantMessage | Callable[[Sequence[Message]], AssistantMessage]

_ids = itertools.count(1)


def call(name: str, _id: str | None = None, **arguments: Any) -> ToolCall:
    return ToolCall(id=_id or f"call_{next(_ids):04d}", name=name, arguments=arguments)


def reply(text: str = "", *calls: ToolCall) -> AssistantMessage:
    return AssistantMessage(content=text, tool_calls=calls)


@dataclass(frozen=True)
class Request:
    messages: tuple[Message, ...]
    tools: tuple[str, ...]
    tool_choice: ToolChoice


class ScriptExhausted(RuntimeError):
    pass


class ScriptedModel:
    """Replies from a list (one per request), or from a function of the transcript."""

    scripted = True

    def __init__(self, script: Sequence[Reply] | Callable[[Sequence[Message], Sequence[str]], AssistantMessage],
                 *, latency_s: float = 0.0, label: str = "scripted (deterministic test model)",
                 strict: bool = True, keep_requests: bool = True) -> None:
        self._script = script
        self._position = 0
        self.latency_s = latency_s
        self.label = label
        self.strict = strict
        self.keep_requests = keep_requests  # tests read them; a benchmark would only fill memory
        self.requests: list[Request] = []

    async def aclose(self) -> None:
        """Nothing held."""

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        *,
        tool_choice: ToolChoice = AUTO,
        max_tokens: int | None = None,
    ) -> Completion:
        started = time.perf_counter()
        if self.keep_requests:
            self.requests.append(Request(tuple(messages), tuple(t.name for t in tools), tool_choice))
        problems = repair(messages).problems if self.strict else []
        if problems:
            raise ModelError("bad_request", f"scripted model rejected an invalid transcript: {problems}")
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        names = [t.name for t in tools]
        if callable(self._script):
            message = self._script(messages, names)
        else:
            if self._position >= len(self._script):
                raise ScriptExhausted(f"the script has only {len(self._script)} replies")
            step = self._script[self._position]
            self._position += 1
            message = step if isinstance(step, AssistantMessage) else step(messages)
        if tool_choice.mode == "none" and message.tool_calls:
            message = AssistantMessage(content=message.content or "(scripted summary)")
        usage = Usage(len(messages), estimate_tokens(message.content))  # a scripted model reads no tokens
        return completion(started, message, usage)
