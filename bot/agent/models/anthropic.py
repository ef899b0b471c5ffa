"""Anthropic Messages API adapter (official ``anthropic`` SDK).

Wire rules honoured here: all results of one assistant turn go into ONE following
user message as ``tool_result`` blocks, before any text; ``is_error`` on failures;
no empty text blocks; a truncated ``tool_use`` is never returned for execution.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, cast

import anthropic

from bot.agent.models.base import AUTO, Completion, ModelError, ModelStop, ToolChoice, Usage, classify_api_error
from core.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tools.registry import ToolDefinition

log = logging.getLogger(__name__)

_MAX_PAUSE_CONTINUATIONS = 3


def to_wire(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """Our transcript → (system prompt, Anthropic messages)."""
    system: list[str] = []
    wire: list[dict[str, Any]] = []

    def user_turn() -> list[dict[str, Any]]:
        if not wire or wire[-1]["role"] != "user":
            wire.append({"role": "user", "content": []})
        content: list[dict[str, Any]] = wire[-1]["content"]
        return content

    for m in messages:
        if isinstance(m, SystemMessage):
            system.append(m.content)
        elif isinstance(m, UserMessage):
            if m.content.strip():
                user_turn().append({"type": "text", "text": m.content})
        elif isinstance(m, ToolResultMessage):
            blocks = user_turn()
            first_text = next((i for i, b in enumerate(blocks) if b["type"] == "text"), len(blocks))
            blocks.insert(first_text, {
                "type": "tool_result", "tool_use_id": m.call_id, "content": m.content, "is_error": m.is_error,
            })
        elif isinstance(m, AssistantMessage):
            turn: list[dict[str, Any]] = []
            if m.content.strip():
                turn.append({"type": "text", "text": m.content})
            turn.extend({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                        for c in m.tool_calls)
            if not turn:
                turn.append({"type": "text", "text": "(no reply)"})
            if wire and wire[-1]["role"] == "assistant":
                wire[-1]["content"].extend(turn)
            else:
                wire.append({"role": "assistant", "content": turn})
    wire = [w for w in wire if w["content"]]
    return "\n\n".join(system), wire


_CACHE = {"type": "ephemeral"}


def cached(wire: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prompt-cache breakpoints on the conversation (with the tools' and the system prompt's, four in all, the
    API's limit): at the end of the previous request's prefix (its last user turn, read from the cache) and at
    the end of this one (written for the next step). Each step then pays full price only for what is new."""
    users = [i for i, m in enumerate(wire) if m["role"] == "user"]
    marks = users[-2:] if len(users) >= 2 else users
    if wire and wire[-1]["role"] != "user":
        marks = [*users[-1:], len(wire) - 1]  # a continued (paused) turn ends with the assistant
    out = list(wire)
    for i in marks:
        content = list(out[i]["content"])
        content[-1] = {**content[-1], "cache_control": _CACHE}
        out[i] = {**out[i], "content": content}
    return out


def _tool_choice(choice: ToolChoice) -> dict[str, Any]:
    if choice.mode == "tool":
        return {"type": "tool", "name": choice.name}
    return {"type": choice.mode}



class AnthropicModel:
    scripted = False

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = 2048,
        timeout_s: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.label = f"anthropic:{model}"
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=max_retries,
        )

    async def _create(self, system: str, wire: list[dict[str, Any]], tools: Sequence[ToolDefinition],
                      choice: ToolChoice, max_tokens: int) -> Any:
        kwargs: dict[str, Any] = {}
        if system:
            kwargs["system"] = [{"type": "text", "text": system, "cache_control": _CACHE}]
        if tools:
            kwargs["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                               for t in tools]
            kwargs["tools"][-1] = {**kwargs["tools"][-1], "cache_control": _CACHE}
            kwargs["tool_choice"] = _tool_choice(choice)
        wire = cached(wire)
        try:
            return await self._client.messages.create(
                model=self.model, max_tokens=max_tokens, messages=cast(Any, wire), **kwargs,
            )
        except anthropic.APIError as exc:
            raise classify_api_error(exc, anthropic, "Anthropic") from exc

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        *,
        tool_choice: ToolChoice = AUTO,
        max_tokens: int | None = None,
    ) -> Completion:
        started = time.perf_counter()
        system, wire = to_wire(messages)
        budget = max_tokens or self.max_tokens
        text_parts: list[str] = []
        calls: list[ToolCall] = []
        usage_in = usage_out = cache_read = cache_write = 0
        retried_truncation = False
        continuations = 0
        while True:
            response = await self._create(system, wire, tools, tool_choice, budget)
            usage_in += response.usage.input_tokens
            usage_out += response.usage.output_tokens
            cache_read += response.usage.cache_read_input_tokens or 0
            cache_write += response.usage.cache_creation_input_tokens or 0
            turn_text = [b.text for b in response.content if b.type == "text" and b.text]
            turn_calls = [ToolCall(id=b.id, name=b.name, arguments=dict(b.input or {}))
                          for b in response.content if b.type == "tool_use"]
            reason = response.stop_reason
            if reason == "max_tokens" and turn_calls:
                # The last tool_use may be cut off: never execute it. Retry once with more room.
                if retried_truncation:
                    raise ModelError("truncated", "the model's reply was cut off before its tool call was complete")
                retried_truncation, budget = True, budget * 2
                continue
            if reason == "pause_turn" and continuations < _MAX_PAUSE_CONTINUATIONS:
                # Send the paused turn back as is so the model continues where it stopped.
                continuations += 1
                wire = [*wire, {"role": "assistant", "content": [b.model_dump() for b in response.content]}]
                text_parts.extend(turn_text)
                continue
            if reason == "refusal":
                raise ModelError("refusal", "the model declined to continue with this request")
            if reason == "model_context_window_exceeded":
                raise ModelError("context_window_exceeded", "the conversation no longer fits the model's context")
            text_parts.extend(turn_text)
            calls.extend(turn_calls)
            break
        stop: ModelStop = "tool_use" if calls else ("max_tokens" if reason == "max_tokens" else "end_turn")
        message = AssistantMessage(content="\n".join(text_parts).strip(), tool_calls=tuple(calls))
        usage = Usage(usage_in, usage_out, cache_read, cache_write)
        return Completion(message, stop, usage, (time.perf_counter() - started) * 1000)
