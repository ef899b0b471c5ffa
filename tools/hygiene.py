"""Observation hygiene: scrub secrets and personal data, bound the size.

Applied to every tool result before it is written to the transcript, so the
model, Redis and Slack all see the same cleaned text.
"""

from __future__ import annotations

import json
import re
from typing import Any

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
     "[REDACTED private key]"),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), "[REDACTED slack token]"),
    (re.compile(r"\bxapp-[A-Za-z0-9-]{10,}"), "[REDACTED slack token]"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "[REDACTED aws key]"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "[REDACTED jwt]"),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{12,}"), r"\1 [REDACTED]"),
    (re.compile(r"(?i)\b(password|passwd|pwd|secret|api[_-]?key|token)(\s*[=:]\s*)[^\s,;\"']{4,}"),
     r"\1\2[REDACTED]"),
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@"), r"\1[REDACTED]@"),
    (re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"), "[REDACTED email]"),
    (re.compile(r"(?<![\w.])(?:\+?\d{1,3}[ -]?)?(?:1[3-9]\d{9}|\(?\d{3}\)?[ -]\d{3}[ -]\d{4})(?![\w.])"),
     "[REDACTED phone]"),
)


def scrub_text(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def scrub(value: Any) -> Any:
    """Scrub every string inside a JSON-like value (keys included)."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {scrub_text(str(k)): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
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
