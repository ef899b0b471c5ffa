"""Characters that change how text looks without being seen — bidi controls (U+202E turns ``stnemyap`` into
"payments" on screen), zero-width and other format characters — shown as visible markers (``<U+202E>``) in
whatever we echo to people, so what a person reads is what the string is.

Emoji sequences joined by U+200D (👩‍💻) and the emoji/text presentation selectors stay as they are: they only
choose a glyph, and showing them would garble ordinary messages.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

# Invisible but not in the Cf category: Hangul fillers, the combining grapheme joiner, Khmer and Mongolian
# invisibles, and the variation selectors other than text/emoji presentation (they can smuggle bytes).
_ALSO = frozenset(map(chr, [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x3164, 0xFFA0,
                            *range(0xFE00, 0xFE0E), *range(0xE0100, 0xE01F0)]))
_ZWJ = "\u200d"
_PRESENTATION = "\ufe0e\ufe0f"


_SURROGATE = re.compile("[\ud800-\udfff]")


def well_formed(value: Any) -> Any:
    """Strings (in lists and dicts too) with a lone surrogate — half an emoji, as JSON ``"\\ud83d"`` carries it from
    a client that cut one — replaced by U+FFFD: such a string cannot be encoded, so it could not be stored, sent
    or shown, and a run holding one failed at every step."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {well_formed(k): well_formed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [well_formed(v) for v in value]
    return value


def mend(value: Any) -> None:
    """:func:`well_formed`, in place, for a parsed payload whose parts others already hold (a request's body)."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in list(items):
        if isinstance(item, str):
            if _SURROGATE.search(item):
                value[key] = _SURROGATE.sub("\ufffd", item)
        elif isinstance(item, dict | list):
            mend(item)


def _hidden(ch: str) -> bool:
    return ch in _ALSO or unicodedata.category(ch) == "Cf"


def _pictographic(ch: str) -> bool:
    """An emoji's base or modifier (what a ZWJ joins in an emoji sequence)."""
    return unicodedata.category(ch) == "So" or 0x1F3FB <= ord(ch) <= 0x1F3FF or ch in _PRESENTATION


def _kept(text: str, i: int) -> bool:
    """A ZWJ between two emoji: part of one picture, not a hidden character."""
    return text[i] == _ZWJ and 0 < i < len(text) - 1 and _pictographic(text[i - 1]) and _pictographic(text[i + 1])


def hides(text: str) -> bool:
    """Whether ``text`` holds a character :func:`reveal` would show."""
    return not text.isascii() and any(_hidden(c) and not _kept(text, i) for i, c in enumerate(text))


def reveal(text: str, *, escaped: bool = False) -> str:
    """``text`` with each hidden character as ``<U+XXXX>``; ``escaped``: as ``&lt;U+XXXX&gt;``, for text Slack reads
    as mrkdwn (where a raw ``<`` opens a link)."""
    if text.isascii():
        return text
    left, right = ("&lt;", "&gt;") if escaped else ("<", ">")
    return "".join(f"{left}U+{ord(c):04X}{right}" if _hidden(c) and not _kept(text, i) else c
                   for i, c in enumerate(text))


def hides_any(value: Any) -> bool:
    """Whether any string in a JSON-like value (keys included) holds a hidden character."""
    if isinstance(value, str):
        return hides(value)
    if isinstance(value, dict):
        return any(hides(str(k)) or hides_any(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(hides_any(v) for v in value)
    return False


def reveal_blocks(value: Any) -> Any:
    """Block Kit with hidden characters shown in every ``text``: raw markers in ``plain_text`` objects (shown as
    written), escaped ones everywhere else (mrkdwn). Ids and button values stay intact."""
    if isinstance(value, dict):
        plain = value.get("type") == "plain_text"
        return {k: reveal(v, escaped=not plain) if k == "text" and isinstance(v, str) else reveal_blocks(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [reveal_blocks(v) for v in value]
    return value


def _control(ch: str) -> bool:
    """C0 (but newline and tab), DEL and C1: what a terminal obeys instead of showing (ESC opens colour, cursor,
    clear-screen and OSC 8 hyperlink sequences; C1's CSI and OSC do the same in one byte)."""
    o = ord(ch)
    return (o < 0x20 and ch not in "\n\t") or 0x7F <= o <= 0x9F


def inert(text: str) -> str:
    """``text`` safe to print on an operator's terminal: control characters and hidden ones as ``<U+XXXX>``, so
    a note or a question cannot hide a link, clear the screen or forge a line (``opspilot stats``, ``report``,
    ``check`` and the chat print through this)."""
    return "".join(f"<U+{ord(c):04X}>" if _control(c) else c for c in reveal(text))


def show(line: str = "", **kw: Any) -> None:
    """A line on an operator's terminal: what others wrote (a 👎 note, a question, a server's error) is shown
    with its control characters as ``<U+001B>``, never obeyed (a hidden link, a cleared screen, a forged line)."""
    print(inert(line), **kw)
