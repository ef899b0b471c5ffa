"""OpenAI-compatible Chat Completions adapter (``openai`` SDK): OpenAI, Azure, vLLM, Ollama gateways.

Wire rules honoured here: an assistant message with ``tool_calls`` is followed by one
``role: "tool"`` message per ``tool_call_id``; arguments travel as a JSON string and
may come back as invalid JSON, which the runtime answers as a validation error.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any, Literal, cast

import openai

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


def to_wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, SystemMessage):
            wire.append({"role": "system", "content": m.content})
        elif isinstance(m, UserMessage):
            wire.append({"role": "user", "content": m.content})
        elif isinstance(m, ToolResultMessage):
            wire.append({"role": "tool", "tool_call_id": m.call_id, "content": m.content})
        elif isinstance(m, AssistantMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": m.content or None}
            if m.tool_calls:
                entry["tool_calls"] = [{
                    "id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.raw_arguments
                                 if c.raw_arguments is not None else json.dumps(c.arguments, ensure_ascii=False)},
                } for c in m.tool_calls]
            elif not m.content:
                entry["content"] = "(no reply)"
            wire.append(entry)
    return wire


def _parse_call(call_id: str, name: str, raw: str) -> ToolCall:
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError:
        args = None
    if isinstance(args, dict):
        return ToolCall(id=call_id, name=name, arguments=args)
    return ToolCall(id=call_id, name=name, raw_arguments=raw)


def _tool_choice(choice: ToolChoice) -> Any:
    if choice.mode == "tool":
        return {"type": "function", "function": {"name": choice.name}}
    return {"any": "required"}.get(choice.mode, choice.mode)



TokenField = Literal["auto", "max_completion_tokens", "max_tokens"]


class OpenAIModel:
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
        token_field: TokenField = "auto",
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.label = f"openai-compatible:{model}"
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=max_retries,
        )
        if token_field == "auto":
            # OpenAI's own API rejects max_tokens for its newer models; compatible servers (older vLLM, Ollama)
            # may know only max_tokens.
            own = self._client.base_url.host == "api.openai.com"
            token_field = "max_completion_tokens" if own else "max_tokens"
        self.token_field: str = token_field

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        *,
        tool_choice: ToolChoice = AUTO,
        max_tokens: int | None = None,
    ) -> Completion:
        started = time.perf_counter()
        kwargs: dict[str, Any] = {}
        if tools:
            kwargs["tools"] = [{"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.input_schema}} for t in tools]
            kwargs["tool_choice"] = _tool_choice(tool_choice)
        budget = max_tokens or self.max_tokens
        for attempt in range(2):
            kwargs[self.token_field] = budget
            try:
                response = await self._client.chat.completions.create(
                    model=self.model, messages=cast(Any, to_wire(messages)), **kwargs,
                )
            except openai.APIError as exc:
                raise classify_api_error(exc, openai, "OpenAI-compatible") from exc
            if not response.choices:
                raise ModelError("bad_response", "the model service returned no choices")
            choice = response.choices[0]
            calls = [_parse_call(c.id, c.function.name, c.function.arguments or "")
                     for c in (choice.message.tool_calls or []) if c.type == "function"]
            if choice.finish_reason == "length" and calls:
                if attempt == 0:
                    budget *= 2  # a cut-off call is never executed: retry once with more room
                    continue
                raise ModelError("truncated", "the model's reply was cut off before its tool call was complete")
            if choice.finish_reason == "content_filter":
                raise ModelError("refusal", "the model declined to continue with this request")
            break
        stop: ModelStop = "tool_use" if calls else ("max_tokens" if choice.finish_reason == "length" else "end_turn")
        usage = Usage(response.usage.prompt_tokens, response.usage.completion_tokens) if response.usage else Usage()
        message = AssistantMessage(content=(choice.message.content or "").strip(), tool_calls=tuple(calls))
        return Completion(message, stop, usage, (time.perf_counter() - started) * 1000)
