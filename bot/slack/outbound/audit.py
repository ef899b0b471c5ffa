"""A change from the audit stream in words, in the reader's language: what ran where, who asked, who approved,
how it ended — under an answer and on App Home."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from bot.slack.outbound.blocks import bare, code, escape, who
from bot.slack.outbound.outputs import rollout_words
from bot.slack.outbound.words import say

_TARGET_KEYS = ("service_id", "service", "target")
_VALUE = 80  # characters of an argument shown (the audit stream keeps all of it)


def _cut(value: str) -> str:
    return value if len(value) <= _VALUE else value[:_VALUE - 1] + "…"  # cut, and said so


def ran_a_change(entries: Iterable[Mapping[str, Any]]) -> bool:
    """Whether these audit entries hold a change that ran (done, or started with its outcome unknown): one
    declined, expired, stopped or answered in the thread instead changed nothing."""
    return any(e.get("status") == "ok" or e.get("error_code") == "outcome_unknown" for e in entries)


def audit_line(entry: dict[str, str], lang: str) -> str:
    """``• `restart_service` on `payments` in `prod` — requested by @Ann, approved by @Bob — done``."""
    args = _arguments(entry.get("arguments") or "")
    tool = bare(entry.get("tool") or "?")
    target = next((str(args[k]) for k in _TARGET_KEYS if args.get(k) not in (None, "")), "")
    env = str(args.get("environment") or "")
    if target and env:
        what = say(lang, "audit_on_in", tool=tool, target=bare(target), env=bare(env))
    elif target or env:
        what = say(lang, "audit_on" if target else "audit_in", tool=tool, target=bare(target), env=bare(env))
    else:
        what = f"`{tool}`"
    rest = [f"{escape(k)}={code(_cut(str(v)))}" for k, v in args.items()
            if k not in (*_TARGET_KEYS, "environment") and v not in (None, "")]
    if rest:
        what += say(lang, "audit_with", args=say(lang, "comma").join(rest))
    if entry.get("plan"):
        what += say(lang, "paren", text=code(entry["plan"]))
    people = say(lang, "requested_by", by=who(entry.get("requested_by") or "?"))
    for field, words in (("approved_by", "approved_by"), ("declined_by", "declined_by_person")):
        if entry.get(field):
            people += say(lang, "sep") + say(lang, words, by=who(entry[field]))
    return f"• {what} — {people} — {outcome(entry, lang)}"


def outcome(entry: dict[str, str], lang: str) -> str:
    """How a change ended, once (a status and its error code often say the same thing: "cancelled (cancelled)")."""
    status, code = entry.get("status") or "", entry.get("error_code") or ""
    if status == "ok":  # issued; "done" only once its rollout was seen through (or the tool does not follow one)
        rollout = entry.get("rollout") or "complete"
        return say(lang, "audit_ok") if rollout == "complete" else say(lang, "audit_issued", how=escape(
            rollout_words(rollout, lang)))  # a tool's own rollout word is data: escaped like the rest
    named = {"outcome_unknown": "audit_unknown", "declined_by_user": "audit_declined", "expired": "audit_expired",
             "user_replied_instead": "audit_replied"}
    if code in named:
        return say(lang, named[code])
    if status in ("cancelled", "expired"):  # answered for it when the run stopped: it never started
        return say(lang, "audit_stopped" if status == "cancelled" else "audit_expired")
    return say(lang, "audit_failed", code=escape(code or status or "?"))


def _arguments(raw: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
