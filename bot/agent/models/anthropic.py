"""Anthropic Messages API adapter (official ``anthropic`` SDK).

Wire rules honoured here: all results of one assistant turn go into ONE following
user message as ``tool_result`` blocks, before any text; ``is_error`` on failures;
no empty text blocks; a truncated ``tool_use`` is never returned for execution.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any, cast

import anthropic

from bot.agent.models import convert
from bot.agent.models.base import AUTO, Completion, ModelError, ToolChoice, Usage, label_of
from bot.agent.models.convert import Part, Result, Text
from core.messages import AssistantMessage, Message, ToolCall
from tools.registry import ToolDefinition

log = logging.getLogger(__name__)

_MAX_PAUSE_CONTINUATIONS = 3
_USAGE = {"input_tokens": "input_tokens", "output_tokens": "output_tokens",
          "cache_read_tokens": "cache_read_input_tokens", "cache_write_tokens": "cache_creation_input_tokens"}
_CHOICES = {"auto": {"type": "auto"}, "any": {"type": "any"}, "none": {"type": "none"}}
_NAMED = {"type": "tool", "name": "{name}"}


def _block(part: Part) -> dict[str, Any]:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    if isinstance(part, Result):
        return {"type": "tool_result", "tool_use_id": part.call_id, "content": part.content, "is_error": part.is_error}
    return {"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments}


def to_wire(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """Our transcript → (system prompt, Anthropic messages)."""
    system, turns = convert.conversation(messages)
    return system, [{"role": t.role, "content": [_block(p) for p in t.parts]} for t in turns]


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
        self.label = label_of("anthropic", model)
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
            kwargs["tool_choice"] = convert.tool_choice(choice, _CHOICES, _NAMED)
        wire = cached(wire)
        try:
            return await self._client.messages.create(
                model=self.model, max_tokens=max_tokens, messages=cast(Any, wire), **kwargs,
            )
        except anthropic.APIError as exc:
            raise convert.classify_api_error(exc, anthropic, "Anthropic") from exc

    async def aclose(self) -> None:
        await self._client.close()

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
        usage = Usage()
        retried_truncation = False
        continuations = 0
        while True:
            try:
                response = await self._create(system, wire, tools, tool_choice, budget)
            except ModelError as exc:  # the doubled room refused (past the model's output limit): as cut off as before
                if retried_truncation and exc.kind == "bad_request":
                    raise convert.truncated() from exc
                raise
            usage = convert.add(usage, convert.usage_of(response.usage, _USAGE))
            turn_text = [b.text for b in response.content if b.type == "text" and b.text]
            turn_calls = [_call(b.id, b.name, b.input) for b in response.content if b.type == "tool_use"]
            reason = response.stop_reason
            if reason == "max_tokens" and turn_calls:
                # The last tool_use may be cut off: never execute it. Retry once with more room.
                if retried_truncation:
                    raise convert.truncated()
                retried_truncation, budget = True, budget * 2
                continue
            if reason == "pause_turn" and continuations < _MAX_PAUSE_CONTINUATIONS:
                # Send the paused turn back as is so the model continues where it stopped.
                continuations += 1
                wire = [*wire, {"role": "assistant", "content": [b.model_dump() for b in response.content]}]
                text_parts.extend(turn_text)
                continue
            if reason == "refusal":
                raise convert.refused()
            if reason == "model_context_window_exceeded":
                raise convert.too_long()
            text_parts.extend(turn_text)
            calls.extend(turn_calls)
            break
        message = AssistantMessage(content="\n".join(text_parts).strip(), tool_calls=tuple(calls))
        return convert.completion(started, message, usage, cut_off=reason == "max_tokens")


def _call(call_id: str, name: str, given: object) -> ToolCall:
    """A ``tool_use`` as a call; an ``input`` that is not an object (a list, a string) is answered with a
    validation_error by the runtime, as OpenAI's unparsable arguments are — never the end of the run."""
    if isinstance(given, dict):
        return ToolCall(id=call_id, name=name, arguments=given)
    if given is None:
        return ToolCall(id=call_id, name=name)
    return ToolCall(id=call_id, name=name, raw_arguments=json.dumps(given, ensure_ascii=False, default=str))
