"""Markdown for documents OpsPilot writes (an incident canvas, its file fallback, ``opspilot report``): values
quoted as data, and the model's words kept apart from OpsPilot's record.

Slack documents code spans for canvas Markdown but not CommonMark's longer fences (````` ``a`b`` `````), and a
renderer that does not know them would close the span at the value's own backtick — the very attack. So a
backtick inside a value is shown as ``ˋ`` (U+02CB), which no renderer reads as a fence.
"""

from __future__ import annotations

import re

from core.text import reveal

TICK = "\u02cb"
"""What a backtick inside a quoted value is shown as."""


def code(value: object) -> str:
    """Any value as one Markdown code span on one line, shown as written (hidden characters as ``<U+…>``): no link,
    mention, heading or formatting of its own can come out of it. Empty for an empty value."""
    shown = " ".join(reveal(str(value)).replace("`", TICK).split())
    return f"`{shown}`" if shown else ""


_SPAN = re.compile(r"`([^`\n]+)`")
_INERT = re.compile(
    r"!?\[(?P<label>[^\]\n]*)\]\((?P<target>[^)\s]*)\)"  # [label](url), ![alt](url)
    r"|<(?P<angled>(?!@[UW][A-Z0-9]{2,}(?:\|[^>\n]*)?>)[^<>\n]*)>"  # <url>, <!channel>, <http…|…>, <#C…>: not <@U…>
    r"|(?P<url>\b[a-z][a-z0-9+.-]*://[^\s<>()\[\]]+)"  # a bare address with a scheme
    r"|(?P<domain>\b(?:www\.)?(?:[a-z0-9-]+\.)+[a-z]{2,}(?:/[^\s<>()\[\]]*)?)",  # evil.example, www.x.example/sso
    re.I)


_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*://[^\s|]*", re.I)


def inert(text: str) -> str:
    """The model's words with every link, address, bare domain, broadcast mention (``<!channel>``) and Slack link
    (``<http…|…>``) as a code span: it read messages anyone could write, so none of them is the document's. Its
    own code spans stay spans; a stray backtick, which would pair with the spans added here, is shown as ``ˋ``.
    A person it names by ``<@U…>`` stays a person (shown as a mention later)."""
    out, at = [], 0
    for span in _SPAN.finditer(text):
        out += [_quote_links(text[at:span.start()].replace("`", TICK)), code(span.group(1))]
        at = span.end()
    out.append(_quote_links(text[at:].replace("`", TICK)))
    return "".join(out)


def _quote_links(text: str) -> str:
    def quoted(m: re.Match[str]) -> str:
        if m.group("target") is not None:
            label, target = m.group("label"), m.group("target")
            label = _quote_links(label)  # a label may be a domain itself
            return f"{label} ({code(target)})" if target else label
        angled = m.group("angled")
        if angled is not None:  # <https://…> is an address; anything else in <> is shown whole
            return code(angled if _SCHEME.fullmatch(angled) else m.group(0))
        found = m.group("url") or m.group("domain")
        address = found.rstrip(".,;:!?'\"")  # a sentence's full stop is not the address's
        return code(address) + found[len(address):]

    return _INERT.sub(quoted, reveal(text))


_BLOCK = re.compile(r"^(\s*(?:(?:[-*+]|\d{1,9}[.)])\s+|>\s*)*)(?=#|(?:=+|-+)\s*$|([-*_])(?:\s*\2){2,}\s*$)")
"""A line that would make a heading (``#``; ``===``/``---`` under a line) or a rule, also inside a list item or a
quote of its own (``- ## What was done``): escaped at its first mark."""


def fenced(text: str) -> list[str]:
    """The model's section as a block quote: every line of it visibly inside (a blank one too, so the quote does
    not end), none able to make a heading or a rule that would pass for the document's own. The escaped mark is
    shown as written whether or not the renderer knows backslash escapes."""
    return [f"> {line}" if line.strip() else ">"
            for line in (_BLOCK.sub(lambda m: m.group(1) + "\\", raw.rstrip()) for raw in text.strip().splitlines())]
