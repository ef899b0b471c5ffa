"""Long text in parts that each fit a limit (Slack's 3,000 characters per section), cut where a reader would:
between paragraphs, else between lines, else after a sentence (``。！？；`` as well as ``.!?``), else between
words (for Chinese, between characters) — inside a word only when one word alone is longer than a part.

A fenced code block that fits in a part is never cut; a longer one is cut between its lines, its fence closed
at the end of the part and opened again in the next, so every part shows as written. Every part after the
first starts with a mark saying it continues ("(continued)").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

FENCE = "```"
_OPEN = FENCE + "\n"
_CLOSE = "\n" + FENCE

_PARAGRAPH = re.compile(r"\n[ \t]*\n\s*")
# A sentence ends after . ! ? followed by a space (not "e.g." or a list's "1."), or after CJK punctuation, which
# needs no space; closing quotes and brackets stay with their sentence.
_SENTENCE = re.compile(r"(?<!\b\w)[.!?]+[\"')\]”’]*(?=\s)|[。！？；…]+[”’」』）)\]]*")
_SPACE = re.compile(r"\s")
_CJK = re.compile(r"[\u3000-\u30ff\u3400-\u9fff\uac00-\ud7af\uff00-\uffef]")
_NO_LINE_START = frozenset("，。、：；！？）」』”’)]}")
_ENTITY_HEAD = re.compile(r"&[#\w]*$")
_ENTITY_TAIL = re.compile(r"[#\w]*;")


@dataclass(frozen=True)
class Part:
    body: str
    """This part's slice of the text: the bodies of all parts joined are the text, exactly."""
    mark: str = ""
    opens: bool = False
    """It starts inside a code block: the fence is opened again."""
    closes: bool = False
    """It ends inside a code block: the fence is closed here."""

    @property
    def text(self) -> str:
        """The part as shown: its mark, a reopened fence, the body without surrounding blank space, a closing
        fence."""
        core = self.body.rstrip() if self.opens else self.body.strip()
        return (f"{self.mark}\n" if self.mark else "") + (_OPEN if self.opens else "") + core + \
            (_CLOSE if self.closes else "")


def split(text: str, limit: int, mark: str = "") -> list[Part]:
    """``text`` in parts whose :attr:`Part.text` is at most ``limit`` characters (none for blank text)."""
    if limit < len(mark) + 1 + len(_OPEN) + len(_CLOSE) + 16:
        raise ValueError(f"a limit of {limit} leaves no room for text")
    packer = _Packer(limit, mark)
    for piece, kind in _segments(text):
        packer.add(piece, kind)
    return packer.done()


def _segments(text: str) -> list[tuple[str, str]]:
    """Paragraphs (each with the blank lines after it) and code blocks, in order: ``prose``, ``code``, or
    ``open`` for a code block never closed."""
    out: list[tuple[str, str]] = []
    at = 0
    while at < len(text):
        start = text.find(FENCE, at)
        prose = text[at:start if start >= 0 else len(text)]
        mark = 0
        for m in _PARAGRAPH.finditer(prose):
            out.append((prose[mark:m.end()], "prose"))
            mark = m.end()
        if mark < len(prose):
            out.append((prose[mark:], "prose"))
        if start < 0:
            break
        end = text.find(FENCE, start + len(FENCE))
        if end < 0:
            out.append((text[start:], "open"))
            break
        out.append((text[start:end + len(FENCE)], "code"))
        at = end + len(FENCE)
    return out


class _Packer:
    """Fills parts in order: a segment goes whole into the current part if it fits, else whole into the next
    if it fits there, else it is cut at its best boundary in the room left."""

    def __init__(self, limit: int, mark: str) -> None:
        self.limit, self.mark = limit, mark
        self.parts: list[Part] = []
        self.body = ""
        self.opens = False
        self.dangling = False  # the text ends inside a code block nobody closed

    def _head(self, opens: bool) -> int:
        return (len(self.mark) + 1 if self.parts and self.mark else 0) + (len(_OPEN) if opens else 0)

    def room(self) -> int:
        """What is left for text in the current part (a closing fence is always kept room for)."""
        used = len(self.body) if self.opens else len(self.body.lstrip())
        return self.limit - self._head(self.opens) - len(_CLOSE) - used

    def empty(self) -> bool:
        return not self.body.strip()

    def flush(self, closes: bool = False) -> None:
        self.parts.append(Part(self.body, self.mark if self.parts else "", self.opens, closes))
        self.body, self.opens = "", closes

    def add(self, piece: str, kind: str) -> None:
        code = kind != "prose"
        while piece:
            if not code and self.empty() and not self.opens:  # a part never starts with blank space
                rest = piece.lstrip()
                self.body, piece = self.body + piece[:len(piece) - len(rest)], rest
                if not piece:
                    return
            room = self.room()
            if len(piece.rstrip()) <= room:
                self.body += piece
                self.dangling = kind == "open"
                return
            fresh = self.limit - (len(self.mark) + 1 if self.mark else 0) - len(_CLOSE)
            if not self.empty() and len(piece.strip()) <= fresh:
                self.flush()  # a paragraph or code block that fits in a part of its own starts one
                continue
            at = (_code_cut if code else _prose_cut)(piece, room, self.empty())
            if at is None:  # nothing worth cutting at in the room left: the next part starts with it
                self.flush()
                continue
            if not code:  # the blank space after the cut ends this part (and is not shown)
                while at < len(piece) and piece[at].isspace():
                    at += 1
            self.body += piece[:at]
            piece = piece[at:]
            self.flush(closes=code)

    def done(self) -> list[Part]:
        if self.empty() and self.parts and not self.opens:
            last = self.parts[-1]  # trailing blank space: kept in the text, never a part of its own
            self.parts[-1] = replace(last, body=last.body + self.body)
        elif not self.empty() or self.opens:
            self.flush(closes=self.dangling)
        return self.parts


def _prose_cut(piece: str, room: int, alone: bool) -> int | None:
    """Where to end a part in a paragraph longer than ``room``: after a line, else a sentence; when the part has
    nothing else (``alone``), else between words, else anywhere that is not inside a link or an entity."""
    lead = len(piece) - len(piece.lstrip())
    window = piece[:room + 1]
    line = window.rfind("\n") + 1
    line = line if line > lead else 0
    sentence = _last(piece, (m.end() for m in _SENTENCE.finditer(window) if lead < m.end() <= room))
    for at in (line, sentence):
        if at >= room // 2:
            return at
    if line or sentence:
        return max(line, sentence)
    if not alone:
        return None
    spaces = (m.start() for m in _SPACE.finditer(window) if lead < m.start() <= room)
    between = (i for i in range(lead + 1, min(room, len(piece) - 1) + 1) if _cjk_break(piece, i))
    word = max(_last(piece, spaces), _last(piece, between))
    if word:
        return word
    return next((i for i in range(room, max(room - 12, lead), -1) if _safe(piece, i)), room)


def _code_cut(piece: str, room: int, alone: bool) -> int | None:
    """Where to end a part in a code block longer than ``room``: after a line, keeping the fence's own line with
    some code and leaving some code for the next part; a line longer than a part is cut between words."""
    first = piece.find("\n") + 1 if piece.startswith(FENCE) else 0
    if piece.startswith(FENCE) and first == 0:
        first = len(FENCE)
    window = piece[:room + 1]

    def leaves_code(at: int) -> bool:
        return piece[at:].strip() not in ("", FENCE)

    for m in reversed(list(re.finditer("\n", window))):
        at = m.end()
        if at > first and at <= room and piece[first:at].strip() and leaves_code(at):
            return at
    if not alone:
        return None
    spaces = [m.start() for m in _SPACE.finditer(window) if first < m.start() <= room and leaves_code(m.start())]
    if spaces:
        return spaces[-1]
    return next((i for i in range(room, first, -1) if leaves_code(i)), max(room, 1))


def _last(piece: str, candidates: Iterable[int]) -> int:
    """The last of ``candidates`` (positions, ascending) that is not inside a link, an entity or inline code."""
    return next((at for at in reversed(list(candidates)) if _safe(piece, at)), 0)


def _cjk_break(piece: str, at: int) -> bool:
    """Between two characters of CJK text (which has no spaces), not before its closing punctuation."""
    return bool(_CJK.match(piece[at - 1]) and _CJK.match(piece[at])) and piece[at] not in _NO_LINE_START


def _safe(piece: str, at: int) -> bool:
    """Whether a cut at ``at`` leaves Slack's constructs whole: inline code, ``<link|label>`` or a mention, and
    an escaped character (``&amp;``)."""
    before = piece[piece.rfind("\n", 0, at) + 1:at]
    if before.count("`") % 2 or before.rfind("<") > before.rfind(">"):
        return False
    return not (_ENTITY_HEAD.search(before) and _ENTITY_TAIL.match(piece, at))
