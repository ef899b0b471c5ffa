"""What a run reads but never changes: the model, the tools, the store, the event bus, the limits."""

from __future__ import annotations

from dataclasses import dataclass

from bot.agent.events import EventBus
from bot.agent.limits import Limits
from bot.agent.models.base import ChatModel
from bot.agent.prompt import SYSTEM_PROMPT
from state.store import Store
from tools.registry import Registry


@dataclass(frozen=True)
class RunDeps:
    model: ChatModel
    registry: Registry
    store: Store
    bus: EventBus
    limits: Limits
    system_prompt: str = SYSTEM_PROMPT
    context_budget_tokens: int = 60_000
    interrupt_ttl_s: float = 1800.0
    summary_timeout_s: float = 30.0
