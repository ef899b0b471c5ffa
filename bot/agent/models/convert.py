"""The conversion layer every model adapter shares: our transcript in a neutral shape, usage, errors, the result.

A provider file only maps: neutral parts (:class:`Text`, :class:`~core.messages.ToolCall`, :class:`Result`) to its
blocks, its usage fields to :class:`Usage` (a table of names), its SDK's errors through :func:`classify_api_error`.
Two shapes of a transcript cover the APIs we know: :func:`conversation` (a system prompt apart, then alternating
user/assistant turns, results inside the user turn: Anthropic, and the like) and :func:`flat` (one message each,
in order: OpenAI Chat Completions, and the like).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

from bot.agent.models.base import Completion, ModelError, ModelStop, ToolChoice, Usage
from core.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolResultMessage, UserMessage

log = logging.getLogger(__name__)

NO_REPLY = "(no reply)"
"""Stands in for an assistant turn with neither text nor calls: the APIs reject an empty one."""


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Result:
    call_id: str
    content: str
    is_error: bool


Part = Text | ToolCall | Result


@dataclass
class Turn:
    role: Literal["system", "user", "assistant", "tool"]
    parts: list[Part] = field(default_factory=list)


def conversation(messages: Sequence[Message]) -> tuple[str, list[Turn]]:
    """(system prompt, alternating user/assistant turns). All results of one assistant turn go into the following
    user turn before any text; blank text is dropped; consecutive assistant messages become one turn."""
    system: list[str] = []
    turns: list[Turn] = []

    def user_parts() -> list[Part]:
        if not turns or turns[-1].role != "user":
            turns.append(Turn("user"))
        return turns[-1].parts

    for m in messages:
        if isinstance(m, SystemMessage):
            system.append(m.content)
        elif isinstance(m, UserMessage):
            if m.content.strip():
                user_parts().append(Text(m.content))
        elif isinstance(m, ToolResultMessage):
            parts = user_parts()
            first_text = next((i for i, p in enumerate(parts) if isinstance(p, Text)), len(parts))
            parts.insert(first_text, Result(m.call_id, m.content, m.is_error))
        elif isinstance(m, AssistantMessage):
            turn: list[Part] = [Text(m.content)] if m.content.strip() else []
            turn.extend(m.tool_calls)
            if not turn:
                turn.append(Text(NO_REPLY))
            if turns and turns[-1].role == "assistant":
                turns[-1].parts.extend(turn)
            else:
                turns.append(Turn("assistant", turn))
    return "\n\n".join(system), [t for t in turns if t.parts]


def flat(messages: Sequence[Message]) -> list[Turn]:
    """One turn per message, in order (system prompts where they stand, each result a ``tool`` turn). An assistant
    turn with no text leaves it out, unless it has no calls either (then :data:`NO_REPLY`)."""
    out: list[Turn] = []
    for m in messages:
        if isinstance(m, SystemMessage):
            out.append(Turn("system", [Text(m.content)]))
        elif isinstance(m, UserMessage):
            out.append(Turn("user", [Text(m.content)]))
        elif isinstance(m, ToolResultMessage):
            out.append(Turn("tool", [Result(m.call_id, m.content, m.is_error)]))
        elif isinstance(m, AssistantMessage):
            text: list[Part] = [Text(m.content or NO_REPLY)] if m.content or not m.tool_calls else []
            out.append(Turn("assistant", [*text, *m.tool_calls]))
    return out


def text_of(parts: Sequence[Part]) -> str | None:
    """The turn's text (None when it has none): for APIs that carry text beside the calls, not as a block."""
    return next((p.text for p in parts if isinstance(p, Text)), None)


def calls_of(parts: Sequence[Part]) -> list[ToolCall]:
    return [p for p in parts if isinstance(p, ToolCall)]


def tool_choice(choice: ToolChoice, table: Mapping[str, Any], named: Any) -> Any:
    """``table``: the provider's value for each of auto / any / none; ``named``: its value for one tool, with
    the name as ``{name}`` in a string leaf (so a provider writes its choices as data, not code)."""
    if choice.mode == "tool":
        return _named(named, choice.name)
    return table[choice.mode]


def _named(shape: Any, name: str | None) -> Any:
    if isinstance(shape, dict):
        return {k: _named(v, name) for k, v in shape.items()}
    return name if shape == "{name}" else shape


def usage_of(raw: Any, table: Mapping[str, str]) -> Usage:
    """The provider's usage record → ours; ``table`` maps our field to its attribute (absent or None: 0)."""
    if raw is None:
        return Usage()
    return Usage(**{ours: getattr(raw, theirs, None) or 0 for ours, theirs in table.items()})


def add(a: Usage, b: Usage) -> Usage:
    """Usage over several requests of one turn (a continued or retried one)."""
    return Usage(a.input_tokens + b.input_tokens, a.output_tokens + b.output_tokens,
                 a.cache_read_tokens + b.cache_read_tokens, a.cache_write_tokens + b.cache_write_tokens)


def completion(started: float, message: AssistantMessage, usage: Usage, *, cut_off: bool = False) -> Completion:
    """The turn's record; ``started`` is its ``time.perf_counter()``; ``cut_off``: the provider stopped at the
    token limit (said only when no call came back: a call is never executed cut off)."""
    stop: ModelStop = "tool_use" if message.tool_calls else ("max_tokens" if cut_off else "end_turn")
    return Completion(message, stop, usage, (time.perf_counter() - started) * 1000)


# The errors every adapter raises for the same reasons, worded once.

def truncated() -> ModelError:
    return ModelError("truncated", "the model's reply was cut off before its tool call was complete")


def refused() -> ModelError:
    return ModelError("refusal", "the model declined to continue with this request")


def too_long() -> ModelError:
    return ModelError("context_window_exceeded", "the conversation no longer fits the model's context")


def classify_api_error(exc: Exception, sdk: ModuleType, provider: str) -> ModelError:
    """Map an SDK error (after the SDK's own retries) to a readable ModelError.

    ``sdk`` is the ``anthropic`` or ``openai`` module: both expose the same error class names (a connection
    failure, 429, 400, any other HTTP status); another SDK with those names plugs in as is.
    """
    if isinstance(exc, sdk.APIConnectionError):  # timeouts included
        return ModelError("unreachable", "the model service could not be reached")
    if isinstance(exc, sdk.RateLimitError):
        return ModelError("rate_limited", "the model service is rate limiting us; try again shortly")
    if isinstance(exc, sdk.BadRequestError):
        lowered = str(exc).lower()
        if "context" in lowered and ("length" in lowered or "window" in lowered):
            return too_long()
        log.error("BUG or bad config: the %s API rejected our request: %s", provider, exc)
        return ModelError("bad_request", "the model service rejected the request")
    if isinstance(exc, sdk.APIStatusError):
        return ModelError("api_error", f"the model service answered with HTTP {exc.status_code}")
    return ModelError("api_error", "the model service failed")
