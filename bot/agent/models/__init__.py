"""Model adapters behind one protocol: Anthropic, OpenAI-compatible, and scripted."""

from bot.agent.models.base import AUTO, NONE, ChatModel, Completion, ModelError, ToolChoice, Usage

__all__ = ["AUTO", "NONE", "ChatModel", "Completion", "ModelError", "ToolChoice", "Usage"]
