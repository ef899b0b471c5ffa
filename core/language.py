"""Which language a person wrote in, English or Chinese, from their own words: what the thread they start
speaks (OpsPilot's words and the answer alike), and what the demo model answers in."""

from __future__ import annotations

import re
from typing import Literal

Lang = Literal["en", "zh"]

_CJK = re.compile(r"[\u3400-\u9fff]")
# What says nothing of the asker's language: Slack's markup (<@U…> — a colleague's name —, <#C…>, links), a URL,
# an emoji's name, code.
_NOT_WORDS = re.compile(r"<[^>\n]*>|https?://\S+|:[a-z0-9_+'-]+:|`[^`]*`", re.I)
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")
# Characters that make a sentence Chinese, never part of a service's name (支付服务, 订单服务).
_ZH_GRAMMAR = re.compile(r"[的了吗呢吧是在我你请帮看怎么为什这那哪和把给没不]")


def signal(text: str) -> Lang | None:
    """The language of the asker's own words, or None when there are none (a link, an emoji, a mention). A few
    Chinese characters in an English sentence are a name ("why is 支付服务 returning 500s?"): Chinese when its
    grammar is there, or its characters outnumber the Latin words three to one."""
    words = _NOT_WORDS.sub(" ", text)
    han = len(_CJK.findall(words))
    latin = len(_LATIN_WORD.findall(words))
    if han and (han >= 3 * latin or _ZH_GRAMMAR.search(words)):
        return "zh"
    return "en" if latin or han else None
