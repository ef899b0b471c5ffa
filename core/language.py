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
# A token as written: an identifier (us-east-1, payment-service, i-0abc) is one, never its parts.
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]*")
# What the asker quotes (an error string, a log line, a blockquote): data, not their words — unless it is all there
# is to go by.
_QUOTED = re.compile(r'"[^"\n]*"|“[^”\n]*”|「[^」\n]*」|^[ \t]*(?:&gt;|>).*$'
                     # what follows "log:", "this:", "error:"… to the line's end; a log line (a level or a date first)
                     r"|\b(?:logs?|errors?|this|says|said|message|output|trace|shows|showing|got|returns|returned|"
                     r"reads|following)[ \t]*:[^\n]*"
                     r"|^[ \t]*(?:\[?\d{4}-\d\d-\d\d|(?:ERROR|WARN(?:ING)?|INFO|FATAL|DEBUG|CRITICAL)\b).*$",
                     re.M | re.I)
_WORD = re.compile(r"[A-Za-z]+")
# Chinese grammar that no name carries: a sentence-final particle ending a run of Chinese ("又 down 了", "失败了"),
# 的 standing alone between names ("payments 的 deploy"), and the phrases people ask with.
_ZH_GRAMMAR = re.compile(r"[了吗呢吧啊嘛](?![\u3400-\u9fff])|(?<![\u3400-\u9fff])的(?![\u3400-\u9fff])|"
                         r"[帮幫]我|[帮幫]忙|一下|看下|看看|这个|那个|什么|怎么|是不是|能不能|有没有|请问")
_ENGLISH_WORDS = """
a an the is are was were be been being am do does did done has have had not no yes and or but if then than so
of to in on at for from with by about since after before into onto over under until while during why what when
where who whom whose how which can could would should will shall may might must it its this that these those
there here i me my we our us you your he she his her they them their please check show look restart roll back
rollback scale deploy find tell give get see any all some again now down up still just ok okay thanks thank hi
hello hey happened happening going broken failing keeps returning seeing isn doesn don
"""
_ENGLISH = frozenset(_ENGLISH_WORDS.split())
# Command words: English when they stand without Chinese ("help", "status", "stop"), but no weight against Chinese
# naming them ("payments status 异常" is Chinese: an on-call engineer's term, not an English sentence).
_COMMAND_WORDS = """
help status stop cancel start list retry resume pause summary summarize summarise handover schedule schedules
confirm approve decline ack acknowledge investigate
"""
_COMMANDS = frozenset(_COMMAND_WORDS.split())


def _commands_only(own: str) -> bool:
    """The asker's own words are command words and nothing else ("help", "status?", "stop please"): a command word
    among names or in pasted data ("payments-api retry 502", "status=503" in a log line) says no language."""
    said = [w.strip("?!.,;:").lower() for w in own.split()]
    return bool(said) and all(w in _COMMANDS or w in _ENGLISH for w in said)


def signal(text: str) -> Lang | None:
    """The language of the asker's own words, or None when there are none (a link, an emoji, a mention, names alone).
    Chinese grammar ("帮我 rollback 一下 payments", "payments 的 deploy 失败了") is Chinese, whatever English is
    pasted beside it; otherwise Chinese characters with no English sentence words around them are Chinese ("重启
    payment-service", "api-gateway 502 报错"), and English sentence words with a few Chinese characters are an
    English sentence naming something ("why is 在线支付 returning 500s?"), unless the Chinese outweighs them four
    characters to a word. A name's parts are never words ("us-east-1" holds no "us"); command words alone are English
    ("help", "status?"), beside a name or in a pasted log line they say nothing."""
    words = _NOT_WORDS.sub(" ", text)
    own = _QUOTED.sub(" ", words)
    if _CJK.search(own) or any(_WORD.fullmatch(t) and t.lower() in _ENGLISH for t in _TOKEN.findall(own)):
        words = own  # words of their own around the quote (a name or a number beside it says no language)
    han = len(_CJK.findall(words))
    tokens = _TOKEN.findall(words)
    english = sum(1 for t in tokens if _WORD.fullmatch(t) and t.lower() in _ENGLISH)
    if not han:  # names alone ("payments 502", "OOM", "api-gateway") speak no language: the person's goes
        return "en" if english or _commands_only(own) else None
    if _ZH_GRAMMAR.search(words) or not english:
        return "zh"
    return "zh" if han > 4 * english else "en"
