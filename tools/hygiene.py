"""Observation hygiene: scrub secrets and personal data, defuse look-alikes of our prompt's tags, bound the size.

Applied to every tool result before it is written to the transcript, so the
model, Redis and Slack all see the same cleaned text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from core.quote import defuse
from core.redact import redact, redact_value

_TRACEBACK = re.compile(r"Traceback \(most recent call last\):\n(?:[ \t].*\n|\n)*(?P<last>[^\n]*)")


def scrub_text(text: str) -> str:
    """Redacted, and no tag of ours left live (a log line cannot pose as a quoted Slack thread); a Python stack trace
    (a tool's server may send its own) is cut to its last line: people and the model read what failed, not where."""
    text = _TRACEBACK.sub(lambda m: f"{m['last']} (its stack trace left out)", text)
    return defuse(redact(text))


def scrub(value: Any) -> Any:
    return _defused(redact_value(value))


def _defused(value: Any) -> Any:
    if isinstance(value, str):
        return defuse(value)
    if isinstance(value, dict):
        return {defuse(k) if isinstance(k, str) else k: _defused(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_defused(v) for v in value]
    return value


def _shrink(value: Any, max_items: int, max_chars: int) -> Any:
    if isinstance(value, str):
        if len(value) > max_chars:
            return f"{value[:max_chars]}… ({len(value) - max_chars} more characters omitted)"
        return value
    if isinstance(value, dict):
        return {k: _shrink(v, max_items, max_chars) for k, v in value.items()}
    if isinstance(value, list | tuple):
        kept = [_shrink(v, max_items, max_chars) for v in value[:max_items]]
        if len(value) > max_items:
            kept.append(f"… {len(value) - max_items} more items omitted")
        return kept
    return value


def bound(value: Any, budget_chars: int) -> Any:
    """Shrink lists and strings until the JSON form fits ``budget_chars``; say what was left out."""
    if len(json.dumps(value, ensure_ascii=False, default=str)) <= budget_chars:
        return value
    max_items, max_chars = 50, max(budget_chars // 2, 64)
    shrunk = value
    for _ in range(12):
        shrunk = _shrink(value, max_items, max_chars)
        if len(json.dumps(shrunk, ensure_ascii=False, default=str)) <= budget_chars:
            return shrunk
        max_items, max_chars = max(max_items // 2, 1), max(max_chars // 2, 32)
    text = json.dumps(shrunk, ensure_ascii=False, default=str)
    return f"{text[:budget_chars]}… (output truncated to {budget_chars} characters)"


def clean(value: Any, budget_chars: int) -> Any:
    return bound(scrub(value), budget_chars)
