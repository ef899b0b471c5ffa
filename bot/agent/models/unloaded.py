"""A model a process names and never calls: a Slack front's (``serve --workers N``, or fronts deployed apart).

A front only stores requests and hands runs on to workers, yet it assembles an engine like every process. Building
the configured provider's adapter would import its SDK — Anthropic's takes ~0.9 s, more than a whole worker's
start — before the front could acknowledge anything: after a restart mid-incident, Slack's events would wait on an
import the front never uses. The label is the one the workers show, so a front's banner and its App Home say the
same model."""

from __future__ import annotations

from collections.abc import Sequence

from bot.agent.models.base import AUTO, Completion, ToolChoice
from core.messages import Message
from tools.registry import ToolDefinition


class ModelNotLoaded(RuntimeError):
    """A process built without the model was asked to run it: a wiring bug, never a provider's problem."""


class Unloaded:
    scripted = False

    def __init__(self, label: str) -> None:
        self.label = label

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolDefinition], *,
                       tool_choice: ToolChoice = AUTO, max_tokens: int | None = None) -> Completion:
        raise ModelNotLoaded(f"this process was built without {self.label} (it hands runs on); a run reached it "
                             "by mistake")

    async def aclose(self) -> None:
        return None
