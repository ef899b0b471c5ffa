"""The words of a run's progress message and of a decided question card, in the thread's language: a call's
status, the stand-in model's note, who decided a card and when."""

from __future__ import annotations

from typing import Any

from bot.agent.engine_errors import InvalidDecision
from bot.agent.events import CallDecided
from bot.agent.models.base import DEMO_LABEL
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.words import say


def card_ending(event: CallDecided, lang: str = "en") -> str:
    """A question card's final words: who decided what, and when."""
    by, at = f"<@{event.by}>", kit.hhmm(event.at)
    chosen = say(lang, "colon") + say(lang, "comma").join(f"{kit.escape(kit.field_label(k, lang))} = {kit.code(v)}"
                                                         for k, v in event.values.items()) \
        if event.values else ""
    person = bool(event.by) and kit.who(event.by or "").startswith("<@")
    return {
        "confirmed": f":white_check_mark: {say(lang, 'confirmed_by', by=by, at=at)}",
        "submitted": f":memo: {say(lang, 'submitted_by', by=by, at=at)}{chosen}",
        "declined": f":x: {say(lang, 'declined_by', by=by, at=at)}",
        "replied": f":speech_balloon: {say(lang, 'replied')}",
        "expired": f":hourglass: {say(lang, 'expired')}",
        "cancelled": f":no_entry_sign: {say(lang, 'cancelled_by', by=by, at=at) if person else say(lang, 'cancelled')}",
    }[event.decision]


def progress_text(state: dict[str, Any]) -> str:
    """The progress message as plain text (notifications, screen readers)."""
    lang = str(state.get("lang") or "en")
    lines = [str(state.get("header", ""))] + [f"{kit.escape(ln['tool'])}: {status_word(ln['status'], lang)}"
                                              for ln in state["lines"]]
    return kit.fallback_text("\n".join(lines))


def clip(text: str, limit: int) -> str:
    text = " ".join(text.replace("`", "'").split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


_STATUSES = ("running", "ok", "error", "waiting", "cancelled", "skipped", "expired", "declined", "unknown")


def status_word(status: str, lang: str) -> str:
    return say(lang, f"st_{status}") if status in _STATUSES else status


def model_note(label: str, lang: str) -> str:
    """Under the progress: which stand-in answers (the scripted demo model, or a test's), said in the thread's words."""
    if not label:
        return ""
    return say(lang, "demo_model_note") if label == DEMO_LABEL else say(lang, "model_note", model=f"`{label}`")


def form_refusal(exc: InvalidDecision, lang: str) -> str:
    """Why a form's answer was not accepted, in ``lang`` where it is one OpsPilot words (else its English, quoted
    in a Chinese form): Slack's card and the terminal's question say it alike."""
    fields = say(lang, "and").join(kit.field_label(f, lang) for f in exc.fields)
    if exc.code == "missing":
        return say(lang, "form_missing", fields=fields)
    if exc.code == "not_a_choice":
        choices = ", ".join(kit.code(c) for c in exc.choices)
        return say(lang, "form_not_a_choice", fields=fields, choices=choices)
    return str(exc) if lang == "en" else kit.code(exc)
