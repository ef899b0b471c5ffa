"""Find the other language in what OpsPilot wrote: English runs in a Chinese thread, CJK in an English one.

Only OpsPilot's own words are judged. Left out: code (```…``` and `…`), links' targets and labels (a question or a
runbook's title), mentions, emoji codes, identifiers (``restart_service``, ``payments/prod``, ``docs/x.md``) and a
short list of proper nouns and data names (the demo catalog's services, environments); an argument's name is an
identifier too (``reason=`…```)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

# Web API methods that write what a person reads, and the keys of their bodies that hold text.
WRITES = ("chat.postMessage", "chat.update", "chat.postEphemeral", "chat.startStream", "chat.appendStream",
          "chat.stopStream", "assistant.threads.setStatus", "views.publish", "views.open", "views.update",
          "chat.scheduleMessage", "canvases.create", "canvases.edit", "files.completeUploadExternal")
TEXT_KEYS = frozenset({"text", "title", "output", "details", "status", "markdown_text", "loading_messages",
                       "placeholder", "label", "hint", "markdown", "initial_comment"})

PROPER = ("OpsPilot", "Slack", "UTC", "Ctrl-C", "Payment Service", "Order Service", "API Gateway", "payments",
          "orders", "gateway", "prod", "staging", "Prometheus", "Loki", "Kubernetes", "Alertmanager", "Grafana",
          "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "API", "LLM", "ts", "id", "cron", "OK", "ms")

# A line citing a document quotes it (its title, section and words, in the document's language), as the eval's
# language check reads answers too (bot/eval/score.py).
_CITES = re.compile(r"^.*\(`[^`\n]*\.md`\).*$", re.M)
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
# mrkdwn and markdown links, and a bare address (a permalink in a canvas): an address is in no language
_LINK = re.compile(r"<(?:https?|mailto|slack):[^>]*>|\[[^\]\n]*\]\([^)\n]*\)|https?://[^\s)>|]+")
_MENTION = re.compile(r"<[@#!][^>]*>")
_EMOJI = re.compile(r":[a-z0-9_+\-]+:")
_IDENT = re.compile(r"(?<![A-Za-z0-9])(?:[A-Za-z_]+(?==)|[A-Za-z0-9\-]+(?:[_./][A-Za-z0-9\-]+)+"
                    r"|[A-Za-z]+\d[A-Za-z0-9]*)(?![A-Za-z0-9])")
_CJK = re.compile(r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]")
_TOKEN = r"(?:[A-Za-z]+(?:['’][a-z]+)?|\d+(?:[.,:]\d+)*%?)"
_RUN = re.compile(rf"(?<![A-Za-z])[A-Za-z]{{2,}}(?:['’][a-z]+)?(?:[ \t,;:'’()\-]+{_TOKEN})*|\d+(?:[.,:]\d+)*%?"
                  rf"(?:[ \t,;:'’()\-]+{_TOKEN})+")
_WORD = re.compile(r"[A-Za-z]+")


def texts(body: Any) -> Iterator[str]:
    """Every text a person may read in a Web API call's body (blocks, stream chunks, views, statuses)."""
    if isinstance(body, dict):
        for key, value in body.items():
            if key == "status" and body.get("type") == "task_update":
                continue  # a task card's state (pending, complete…): Slack's code, shown as its own icon
            if key in TEXT_KEYS and isinstance(value, str):
                yield value
            elif key in TEXT_KEYS and isinstance(value, list) and all(isinstance(v, str) for v in value):
                yield from value
            else:
                yield from texts(value)
    elif isinstance(body, list):
        for item in body:
            yield from texts(item)


def written(calls: Iterable[tuple[str, dict[str, Any]]]) -> list[str]:
    return [t for method, body in calls if method in WRITES for t in texts(body) if t.strip()]


def ours(text: str, proper: Iterable[str] = ()) -> str:
    """The text with code, links, mentions, emoji, identifiers and proper nouns taken out (each left as ␣)."""
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    text = _CITES.sub(" ␣ ", text)
    for pattern in (_CODE, _LINK, _MENTION, _EMOJI):
        text = pattern.sub(" ␣ ", text)
    text = _IDENT.sub(" ␣ ", text)
    for name in sorted({*PROPER, *proper}, key=len, reverse=True):
        text = re.sub(rf"(?<![A-Za-z]){re.escape(name)}(?![A-Za-z])", " ␣ ", text)
    return text


def english_runs(text: str, proper: Iterable[str] = ()) -> list[str]:
    """English outside code and data: runs of words ("choose environment to restart"), a number with a word
    ("1 candidate"), and a word alone ("(rising)", "source:") — stricter than the two-word rule, on purpose."""
    return [m.group(0) for m in _RUN.finditer(ours(text, proper)) if _WORD.search(m.group(0))]


def chinese(text: str, proper: Iterable[str] = ()) -> list[str]:
    return _CJK.findall(ours(text, proper))


def leaks(all_texts: Iterable[str], lang: str, proper: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(what was found, the text it was found in) for every text that has the other language."""
    found = []
    for text in all_texts:
        hits = english_runs(text, proper) if lang == "zh" else chinese(text, proper)
        found += [(hit, text) for hit in dict.fromkeys(hits)]
    return found
