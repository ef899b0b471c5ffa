"""Hard limits on a run, counted across pause and resume (``shouldStop`` in the seed article)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.stops import StopReason
from state.records import CallTrace


class Limits(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_steps: int = Field(8, ge=1, le=100, description="model steps per run (a run stopped by a limit makes one "
                                                        "more call, for its summary)")
    max_wall_time_s: float = Field(180.0, gt=0, description="active time per run; waiting for a person is not counted")
    max_tool_fails_in_row: int = Field(4, ge=1, description="failed tool calls in a row before the run stops")
    identical_call_limit: int = Field(3, ge=2, description="the same call this many times in a row stops the run")


def call_digest(tool: str, arguments: dict[str, Any]) -> str:
    """Tool name plus canonicalised arguments: equal for the same call however the JSON was ordered."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return f"{tool}:{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"


def identical_streak(recent: Sequence[str]) -> int:
    if not recent:
        return 0
    last, streak = recent[-1], 0
    for digest in reversed(recent):
        if digest != last:
            break
        streak += 1
    return streak


def repeated_steps(steps: Sequence[frozenset[str]]) -> int:
    """How many steps in a row, up to the last, asked for exactly the same calls: a step of several calls made
    again and again is a loop as one call is (its calls alternate, so no one call repeats in a row)."""
    streak = 0
    for calls in reversed(steps):
        if calls != steps[-1]:
            break
        streak += 1
    return streak


def steps_of(trace: Sequence[object]) -> list[frozenset[str]]:
    """The calls of each step of a run's trace (run, or answered: a person's decision counts as its call)."""
    steps: dict[int, set[str]] = {}
    for e in trace:
        if isinstance(e, CallTrace) and e.status != "interrupted":
            steps.setdefault(e.step, set()).add(e.args_digest)
    return [frozenset(steps[n]) for n in sorted(steps)]


def should_stop(*, step: int, active_s: float, fail_streak: int, recent_calls: Sequence[str],
                limits: Limits, steps: Sequence[frozenset[str]] = ()) -> StopReason | None:
    if step >= limits.max_steps:
        return "max_steps"
    if active_s >= limits.max_wall_time_s:
        return "timeout"
    if fail_streak >= limits.max_tool_fails_in_row:
        return "too_many_fails"
    if max(identical_streak(recent_calls), repeated_steps(steps)) >= limits.identical_call_limit:
        return "loop_detected"
    return None
