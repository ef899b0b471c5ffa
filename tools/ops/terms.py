"""Tokenising mixed Chinese/English text: words for Latin scripts, character bigrams for CJK."""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9][a-z0-9_.-]*|[\u3400-\u9fff]+")
_CJK = re.compile(r"[\u3400-\u9fff]")


def terms(text: str) -> list[str]:
    out: list[str] = []
    for token in _WORD.findall(text.lower()):
        if _CJK.match(token):
            out.extend(token[i:i + 2] for i in range(max(len(token) - 1, 1)))
        elif len(token) > 1:
            out.append(token)
    return out
