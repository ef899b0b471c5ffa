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

from bot.agent.models import convert
from bot.agent.models.base import AUTO, Completion, ModelError, ToolChoice, label_of
from bot.agent.models.convert import Result, Text, Turn
from core.messages import AssistantMessage, Message, ToolCall
from tools.registry import ToolDefinition

log = logging.getLogger(__name__)

_USAGE = {"input_tokens": "prompt_tokens", "output_tokens": "completion_tokens"}
_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
_NAMED = {"type": "function", "function": {"name": "{name}"}}


def _arguments(call: ToolCall) -> str:
    """As JSON; arguments that did not parse (the runtime answered that) as an object holding what the model sent:
    vLLM and SGLang parse every earlier call's arguments and refuse the whole request (400) on one that is not
    JSON, which would end every later turn of the thread."""
    if call.raw_arguments is None:
        return json.dumps(call.arguments, ensure_ascii=False)
    try:
        parsed = json.loads(call.raw_arguments)
    except ValueError:
        parsed = None
    return call.raw_arguments if isinstance(parsed, dict) else \
        json.dumps({"_unparsed": call.raw_arguments}, ensure_ascii=False)


def _message(turn: Turn) -> dict[str, Any]:
    part = turn.parts[0] if turn.parts else None
    if isinstance(part, Result):
        return {"role": "tool", "tool_call_id": part.call_id, "content": part.content}
    if turn.role != "assistant":
        return {"role": turn.role, "content": part.text if isinstance(part, Text) else ""}
    entry: dict[str, Any] = {"role": "assistant", "content": convert.text_of(turn.parts)}
    if calls := convert.calls_of(turn.parts):
        entry["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name,
                                                                             "arguments": _arguments(c)}}
                               for c in calls]
    return entry


def to_wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [_message(t) for t in convert.flat(messages)]


def _parse_call(call_id: str, name: str, raw: str) -> ToolCall:
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError:
        args = None
    if isinstance(args, dict):
        return ToolCall(id=call_id, name=name, arguments=args)
    return ToolCall(id=call_id, name=name, raw_arguments=raw)


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
        self.label = label_of("openai", model)
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=max_retries,
        )
        if token_field == "auto":
            # OpenAI's own API rejects max_tokens for its newer models; compatible servers (older vLLM, Ollama)
            # may know only max_tokens.
            own = self._client.base_url.host == "api.openai.com"
            token_field = "max_completion_tokens" if own else "max_tokens"
        self.token_field: str = token_field

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
        kwargs: dict[str, Any] = {}
        if tools:
            kwargs["tools"] = [{"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.input_schema}} for t in tools]
            kwargs["tool_choice"] = convert.tool_choice(tool_choice, _CHOICES, _NAMED)
        budget = max_tokens or self.max_tokens
        for attempt in range(2):
            kwargs[self.token_field] = budget
            try:
                response = await self._client.chat.completions.create(
                    model=self.model, messages=cast(Any, to_wire(messages)), **kwargs,
                )
            except openai.APIError as exc:
                failure = convert.classify_api_error(exc, openai, "OpenAI-compatible")
                # the doubled room refused (past the model's output limit): as cut off as the first reply was
                raise convert.truncated() if attempt and failure.kind == "bad_request" else failure from exc
            if not response.choices:
                raise ModelError("bad_response", "the model service returned no choices")
            choice = response.choices[0]
            calls = [_parse_call(c.id, c.function.name, c.function.arguments or "")
                     for c in (choice.message.tool_calls or []) if c.type == "function"]
            if choice.finish_reason == "length" and calls:
                if attempt == 0:
                    budget *= 2  # a cut-off call is never executed: retry once with more room
                    continue
                raise convert.truncated()
            if choice.finish_reason == "content_filter":
                raise convert.refused()
            break
        message = AssistantMessage(content=(choice.message.content or "").strip(), tool_calls=tuple(calls))
        return convert.completion(started, message, convert.usage_of(response.usage, _USAGE),
                                  cut_off=choice.finish_reason == "length")
