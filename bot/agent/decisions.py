"""What a person (or the clock) answers to a paused call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Confirm:
    """Run the gated call exactly as stored."""


@dataclass(frozen=True)
class ProvideParams:
    """Fill the missing fields; the merged arguments are validated again before anything runs."""

    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decline:
    reason: str = ""


@dataclass(frozen=True)
class ReplyInstead:
    """The person wrote in the thread instead of answering the form."""

    text: str


@dataclass(frozen=True)
class Expire:
    """Nobody answered in time."""


@dataclass(frozen=True)
class CancelRun:
    """The run was stopped while this call waited."""


Decision = Confirm | ProvideParams | Decline | ReplyInstead | Expire | CancelRun
