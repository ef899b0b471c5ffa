"""Slack mrkdwn for a terminal: what the chat prints is the answer as a person reads it (bold, italics, code,
names), not its markup. Colours only when the output is a terminal; plain text otherwise (pipes, tests)."""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from typing import TextIO

from rich.console import Console
from rich.markup import escape

_CODE = re.compile(r"`([^`\n]+)`")
# Around bold and italics: blank space or punctuation, CJK punctuation too ("…已完成。_来源: x_").
_BOLD = re.compile(r"(^|[\s(（。，；：！？、])\*([^*\n]+?)\*(?=$|[\s.,;:!?)。，；：！？、（）])", re.M)
_ITALIC = re.compile(r"(^|[\s(（。，；：！？、])_([^\n]+?)_(?=$|[\s.,;:!?)。，；：！？、（）])", re.M)
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|([^>]*))?>")
_LINK = re.compile(r"<(https?://[^|>]+)\|([^>]+)>")
_EMOJI = {":white_check_mark:": "✅", ":warning:": "⚠️", ":x:": "❌", ":no_entry_sign:": "🚫",
          ":hourglass:": "⌛", ":memo:": "📝", ":repeat:": "🔁", ":rotating_light:": "🚨"}


def markup(text: str, names: Mapping[str, str] | None = None) -> str:
    """Rich console markup for a Slack mrkdwn text."""
    names = names or {}
    out = _MENTION.sub(lambda m: f"\x00b@{m.group(2) or names.get(m.group(1), m.group(1))}\x01", text)
    out = _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})", out)
    out = html.unescape(out)  # Slack's &lt; &gt; &amp; are the characters
    for code, emoji in _EMOJI.items():
        out = out.replace(code, emoji)
    codes: list[str] = []

    def keep(match: re.Match[str]) -> str:  # code is shown as written: no bold or italics inside it
        codes.append(match.group(1))
        return f"\x02{len(codes) - 1}\x03"

    out = escape(_CODE.sub(keep, out))
    out = _BOLD.sub(r"\1[bold]\2[/bold]", out)
    out = _ITALIC.sub(r"\1[italic]\2[/italic]", out)
    out = re.sub(r"\x02(\d+)\x03", lambda m: f"[cyan]{escape(codes[int(m.group(1))])}[/cyan]", out)
    return out.replace("\x00b", "[bold]").replace("\x01", "[/bold]")


def printer(out: TextIO) -> Console:
    return Console(file=out, highlight=False, soft_wrap=True, emoji=False)
