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
_LATIN_WORD = re.compile(r"[A-Za-z]+")
# English sentence words: function words and the verbs people ask an ops assistant with. Service names, metrics
# and tool words (api-gateway, redis, OOM, CPU, prod, pod, 502) are English in a Chinese sentence too, so only
# these say a sentence is English.
_ENGLISH_WORDS = """
a an the is are was were be been being am do does did done has have had not no yes and or but if then than so
of to in on at for from with by about since after before into onto over under until while during why what when
where who whom whose how which can could would should will shall may might must it its this that these those
there here i me my we our us you your he she his her they them their please check show look restart roll back
rollback scale deploy find tell give get see any all some again now down up still just ok okay thanks thank hi
hello hey happened happening going broken failing keeps returning seeing isn doesn don
"""
_ENGLISH = frozenset(_ENGLISH_WORDS.split())


def signal(text: str) -> Lang | None:
    """The language of the asker's own words, or None when there are none (a link, an emoji, a mention). Chinese
    characters with no English sentence words around them are Chinese, whatever names and terms sit beside them
    ("api-gateway 502 报错", "重启 payment-service"); English sentence words with a few Chinese characters are an
    English sentence naming something ("why is 在线支付 returning 500s?"), unless the Chinese outweighs them four
    characters to a word ("帮我 check 一下 payments 的错误")."""
    words = _NOT_WORDS.sub(" ", text)
    han = len(_CJK.findall(words))
    latin = [w.lower() for w in _LATIN_WORD.findall(words)]
    english = sum(w in _ENGLISH for w in latin)
    if not han:
        return "en" if latin else None
    return "zh" if not english or han > 4 * english else "en"
