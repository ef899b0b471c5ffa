"""Material quoted to the model (a Slack thread, an alert, a message) inside a block it cannot leave.

A block's tag carries a nonce drawn afresh for every request (``<slack_thread_3f9a…>`` … ``</slack_thread_3f9a…>``),
and anything inside the quoted text that looks like one of our tags — a raw ``</slack_thread>``, a forged opening
tag, a nonce seen in an earlier request — has its angle brackets escaped. So quoted text can neither close its
block early nor open one of its own, and the model is told that only the tag with the block's nonce ends it.
"""

from __future__ import annotations

import re
import secrets

from core.text import reveal

TAGS = ("slack_thread", "reply_language", "incident_facts")
"""Every tag our prompts use to delimit material; none of them may appear live inside quoted text."""

# Characters a reader (or a model) skips over: a tag name spelt with them (or with other separators) still reads
# as the tag. One character class, matched without backtracking.
_SKIPPED = re.compile(r"[\s_.\-/\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
                      r"\u202a-\u202e\u2060-\u206f\ufe00-\ufe0f\ufeff]+")
_NAMES = tuple(t.replace("_", "") for t in TAGS)
_OPENERS = "<\uff1c\ufe64\u2039\u3008\u27e8"  # "<" and the look-alikes a model reads as one
_CLOSERS = ">\uff1e\ufe65\u203a\u3009\u27e9"
_OPENER = re.compile(f"[{_OPENERS}]")
_END = re.compile(f"[{_OPENERS}{_CLOSERS}\n]")
_REACH = 200  # how far after its "<" a tag's name and its ">" are looked for


def nonce() -> str:
    """A fresh, unguessable tag suffix: one per request, never reused."""
    return secrets.token_hex(8)


def defuse(text: str) -> str:
    """``text`` with every look-alike of our tags made inert: its angle brackets escaped (``&lt;…&gt;``)."""
    if not any(c in text for c in _OPENERS) or not any(n in _SKIPPED.sub("", text).lower() for n in _NAMES):
        return text
    out: list[str] = []
    done = 0
    for opener in _OPENER.finditer(text):
        at = opener.start()
        if at < done or not _names_ours(text, at + 1):
            continue
        out += [text[done:at], "&lt;"]
        done = at + 1
        end = _END.search(text, done, at + 1 + _REACH)
        if end is not None and text[end.start()] in _CLOSERS:
            out += [text[done:end.start()], "&gt;"]
            done = end.end()
    return "".join([*out, text[done:]])


def _names_ours(text: str, pos: int) -> bool:
    """Whether one of our tag names follows ``pos`` (skipped characters aside): letter by letter, so a text of
    many "<" costs a few steps each."""
    limit, got = min(len(text), pos + _REACH), ""
    while pos < limit and got not in _NAMES:
        skipped = _SKIPPED.match(text, pos, limit)
        if skipped:
            pos = skipped.end()
            continue
        got += text[pos].lower()
        pos += 1
        if not any(n.startswith(got) for n in _NAMES):
            return False
    return got in _NAMES


def quote(body: str, note: str) -> str:
    """``body`` as a ``slack_thread`` block: tagged with a fresh nonce, every tag look-alike inside defused, and
    hidden characters (bidi controls, invisible tag characters that can smuggle words) shown as ``<U+…>``."""
    key = nonce()
    return f'<slack_thread_{key} note="{note}">\n{reveal(defuse(body))}\n</slack_thread_{key}>'


_ATTACHED = re.compile(r"\n?\(Attached, not read: [^\n]*\.\)$")


def attached(text: str, files: list[str]) -> str:
    """``text`` with a note, for the model, of the files that came with it (it cannot read them)."""
    return f"{text}\n(Attached, not read: {', '.join(files)}.)" if files else text


def own_words(question: str) -> str:
    """A question as its person wrote it, for a list that shows it: the note of files OpsPilot added left out."""
    return _ATTACHED.sub("", question)


_LAST_CLOSE = re.compile(rf"</(?:{'|'.join(TAGS)})(?:_[0-9a-f]{{16}})?>")


def split(content: str) -> tuple[str, str]:
    """A user message as the material quoted in it and the question that follows: cut after the last closing tag
    of ours (quoted text cannot hold one, so that is where the material ends)."""
    ends = [m.end() for m in _LAST_CLOSE.finditer(content)]
    return (content[:ends[-1]], content[ends[-1]:]) if ends else ("", content)
