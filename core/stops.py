"""Why a run stops, and the one table of words every front end uses for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

StopReason = Literal[
    "final_answer",
    "cut_off",
    "interrupted",
    "max_steps",
    "timeout",
    "loop_detected",
    "too_many_fails",
    "cancelled",
    "model_error",
    "internal_error",
    "worker_lost",
]

Tone = Literal["done", "stopped", "expired", "warning"]


@dataclass(frozen=True)
class StopWording:
    headline: str
    """What a front end shows as the run's final state, e.g. "Stopped at the step limit"."""
    because: str
    """Completes "the run stopped because …" in answers and synthetic results."""
    tone: Tone
    """How it should look: front ends pick their own icon per tone."""


STOP_WORDING: dict[StopReason, StopWording] = {
    "final_answer": StopWording("Done", "it finished", "done"),
    "cut_off": StopWording("Answer cut off at the model's output limit", "its answer reached the model's output limit",
                           "warning"),
    "interrupted": StopWording("Ended without an answer to my question", "nobody answered its question",
                               "expired"),
    "max_steps": StopWording("Stopped at the step limit", "it reached its step limit", "warning"),
    "timeout": StopWording("Stopped: out of time", "it ran out of time", "warning"),
    "loop_detected": StopWording("Stopped: I was repeating myself", "it kept repeating the same call", "warning"),
    "too_many_fails": StopWording("Stopped: too many tool failures", "too many tool calls failed in a row",
                                  "warning"),
    "cancelled": StopWording("Stopped", "it was stopped", "stopped"),
    "model_error": StopWording("Stopped: model error", "the model could not continue", "warning"),
    "internal_error": StopWording("Stopped: internal error", "of an internal error", "warning"),
    "worker_lost": StopWording("Stopped partway: its worker stopped or lost the state store",
                               "its worker stopped, or lost the state store, before it finished", "warning"),
}
