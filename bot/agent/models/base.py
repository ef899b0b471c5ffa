"""The model seam: one protocol, a completion record, and the one error type that stops a run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from core.messages import AssistantMessage, Message
from tools.registry import ToolDefinition

ModelStop = Literal["end_turn", "tool_use", "max_tokens"]
ModelErrorKind = Literal[
    "unreachable", "api_error", "rate_limited", "truncated", "refusal", "context_window_exceeded",
    "bad_response", "bad_request",
]


@dataclass(frozen=True)
class ToolChoice:
    """``auto`` (default), ``any`` (must call some tool), ``none``, or ``tool`` with a name."""

    mode: Literal["auto", "any", "none", "tool"] = "auto"
    name: str | None = None


AUTO = ToolChoice()
NONE = ToolChoice("none")


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    """Input billed at full price (not read from, nor written to, a prompt cache)."""
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class Completion:
    message: AssistantMessage
    stop: ModelStop
    usage: Usage
    latency_ms: float


DEMO_LABEL = "scripted demo model (no API key configured; rule-based, not an LLM)"
"""The offline demo model's label (here, not in its module: what shows a label need not import the demo)."""


def label_of(provider: str, name: str) -> str:
    """How a provider's model is shown (``anthropic`` or ``openai``: an OpenAI-compatible server)."""
    return f"{'openai-compatible' if provider == 'openai' else provider}:{name}"


class ModelError(Exception):
    """The model could not produce a usable turn; ``public`` is safe to show a user."""

    def __init__(self, kind: ModelErrorKind, public: str) -> None:
        super().__init__(f"{kind}: {public}")
        self.kind = kind
        self.public = public


class ChatModel(Protocol):
    label: str
    """Shown to people: says which provider and model, and says "scripted" when it is."""

    scripted: bool

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        *,
        tool_choice: ToolChoice = AUTO,
        max_tokens: int | None = None,
    ) -> Completion:
        """One model turn. Cancelling the awaiting task cancels the request."""

    async def aclose(self) -> None:
        """Let go of the provider's connections (at shutdown): an SDK client left to the garbage collector closes
        itself on whatever event loop then runs, or on none."""
